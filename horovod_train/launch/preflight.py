"""scripts/preflight.sh: the job's hosts checked before the job, every host
and every pair of hosts at once; one table, and one line per culprit naming
the host or the pair and the fix.

    scripts/preflight.sh -H a:2,b:2 [-p PORT] [--network-interface eth0] [--json]
    scripts/preflight.sh --hostfile hostfiles/2x2
    scripts/preflight.sh --slurm        (inside a Slurm job: its allocation)

The same hosts as the job: a -H list or a hostfile, as scripts/launch.sh
takes them (launch.sh --preflight runs this first with its own arguments),
or a Slurm job's allocation (HVT_PREFLIGHT=1 for scripts/slurm/horovod.sbatch).

The checks, each with its own timeout (docs/clusters.md#preflight lists
what each needs and costs):
  - ssh by key from here to every host, its host key known (BatchMode, as
    horovodrun logs in; not with --slurm, whose ranks are Slurm tasks);
  - on every host, under the job's Python and in its working directory
    (launch/host_facts.py): the checkout's commit, the Python, the Horovod
    build (a digest of its libraries, its frameworks); where the build has
    NCCL, the GPUs against the host's slots, the driver's CUDA against the
    build's, each GPU's compute capability against the build's
    architectures; /dev/shm's size and the free disk where the job writes;
  - the network the job would use (launch/network.py's choice, or the one
    named), and on it every pair of hosts: the rate both ways at once, the
    round trip, the datagrams lost; a pair below half the median pair's
    rate, or losing datagrams, is named; each host's clock against this
    one's;
  - an allreduce over all the job's ranks on that network (torch/
    allreduce_check.py), its bus bandwidth against the slowest pair's rate.
Exit 0 when nothing is named, 1 when something is, 2 for bad input.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from horovod_train.core.errors import ArgumentParser, RunFailed, run_main
from horovod_train.core.options import positive_float
from horovod_train.gpu import rules as gpu_rules
from horovod_train.launch import allocation, host_facts, hosts, network, pipeline, starters
from horovod_train.launch.job import Job, named_network

PROG = "preflight"
FACTS_TIMEOUT_S = 30  # ssh, then the job's Python reading a few hundred MB of libraries
PROBE_TIMEOUT_S = 60  # the whole network part: probe, pairs, clocks
ALLREDUCE_TIMEOUT_S = 120  # horovodrun, every rank importing torch, four allreduces
SLOW_PAIR_SHARE = 0.5  # of the median pair's rate
LOST_SHARE = 0.01  # of the datagrams: a sound link loses none
CLOCK_SKEW_S = 1.0
GIB = 1 << 30


@dataclass
class Culprit:
    where: str  # "host b", "pair a-b", "allreduce"
    what: str  # what is wrong, and the fix

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass
class Findings:
    """What the checks found; the verdicts are read from it (verdicts())."""
    hosts: list[hosts.Host]
    here: dict  # this host's facts: the reference the others are held to
    reach: dict[str, str | None] = field(default_factory=dict)  # host: None or the problem
    facts: dict[str, dict] = field(default_factory=dict)  # host: its facts, or {"error": ...}
    network: str | None = None  # the network's title, as the launch says it
    network_error: str | None = None
    pairs: dict[tuple[str, str], dict] = field(default_factory=dict)
    # Slow at first, then not against a pair measured in the same moment.
    cleared_pairs: list[tuple[str, str]] = field(default_factory=list)
    clocks: dict[str, tuple[float, float]] = field(default_factory=dict)
    allreduce: dict | None = None
    allreduce_error: str | None = None
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # each part's seconds


# --- the verdicts ------------------------------------------------------------------

def ssh_culprit(host: str, problem: str) -> Culprit:
    """The host check's line (hosts.check_host, which names the fix) as a culprit."""
    return Culprit(f"host {host}", problem.removeprefix(f"host {host} ").removeprefix(
        f"host {host}: "))


def host_culprits(host: hosts.Host, found: dict, here: dict, min_shm: float,
                  min_free: float, cpu_only: bool = False) -> list[Culprit]:
    """What keeps `host` from running its ranks, against this host's facts."""
    where = f"host {host.name}"
    if "error" in found:
        return [Culprit(where, found["error"])]
    named = []
    mine, theirs = here["checkout"], found["checkout"]
    if "error" in theirs and "commit" in mine:  # no checkout anywhere: an image's code
        named.append(Culprit(where, f"{theirs['error']} (the job runs in {found['cwd']} "
                                    "there): check out the project there"))
    elif "commit" in mine and theirs["commit"] != mine["commit"]:
        named.append(Culprit(where, f"checkout at {theirs['commit'][:12]}, this host at "
                                    f"{mine['commit'][:12]}: check out the same commit on every "
                                    f"host (git -C {found['cwd']} checkout {mine['commit'][:12]})"))
    if found["python"] != here["python"]:
        named.append(Culprit(where, f"Python {found['python']} ({found['executable']}), this "
                                    f"host {here['python']}: set up every host the same way "
                                    "(scripts/setup.sh, or the image)"))
    mine, theirs = here["horovod"], found["horovod"]
    if "error" in theirs:
        named.append(Culprit(where, f"{theirs['error']} ({found['executable']}): scripts/setup.sh "
                                    "there, or run the image"))
    elif (theirs["digest"], theirs["frameworks"]) != (mine.get("digest"), mine.get("frameworks")):
        named.append(Culprit(where, f"another Horovod build ({describe_build(theirs)}; this "
                                    f"host: {describe_build(mine)}): install the same build on "
                                    "every host (one scripts/setup.sh wheel cache, or the image)"))
    elif not cpu_only:
        named += gpu_culprits(host, found)
    shm = found.get("shm_bytes")
    if shm is not None and shm < min_shm * GIB:
        named.append(Culprit(where, f"/dev/shm is {shm / 2**20:,.0f} MiB, below {min_shm:g} GiB: "
                                    "NCCL and the data loaders need it (docker run --shm-size=8g "
                                    "or --ipc=host; on a bare host: mount -o remount,size=8G "
                                    "/dev/shm)"))
    free = found.get("free_bytes")
    if free is not None and free < min_free * GIB:
        named.append(Culprit(where, f"{free / GIB:.2f} GiB free in {found['workdir']}, below "
                                    f"{min_free:g} GiB: free space there, or point the job's "
                                    "--log-dir and --workdir elsewhere"))
    return named


def describe_build(build: dict) -> str:
    return (f"digest {build.get('digest')}, "
            f"{'+'.join(build.get('frameworks') or []) or 'no framework'}")


def gpu_culprits(host: hosts.Host, found: dict) -> list[Culprit]:
    """Where the build has GPU operations: a GPU per slot (unless Slurm binds
    them per task), a driver new enough for the build's CUDA, and kernels
    for each GPU's capability. Where the project built it for the CPU
    alone: no GPU it would meet (the job trains on them, without --no-cuda)."""
    build = found["horovod"]
    where, gpus = f"host {host.name}", found["gpus"]
    if build.get("gpu_ops") == "none" and gpus.get("count"):
        return [Culprit(where, gpu_rules.cpu_only_problem(host.name, gpus["count"],
                                                          gpus.get("visible")))]
    if build.get("gpu_ops") in (None, "none"):
        return []
    if not gpus:
        return [Culprit(where, gpu_rules.no_gpu_problem(host.name, driver_found=False))]
    named = []
    # Bound per task (Slurm's --gpus-per-task), each rank sees the GPUs Slurm
    # gave it, as this check's own task did: the count is the ranks' to
    # check, by identity, when they start (gpu/rules.py's binding_problem).
    problem = None if gpus.get("per_task") else gpu_rules.gpu_count_problem(host.name, host.slots,
                                                                        gpus["count"])
    if problem:
        named.append(Culprit(where, problem))
    cuda = found.get("torch_cuda") or build.get("cuda")
    if gpus.get("driver_cuda") and cuda:
        problem = gpu_rules.driver_problem(gpus["driver_cuda"], cuda, gpus.get("driver"))
        if problem:
            named.append(Culprit(where, problem))
    archs = (build.get("cuda_archs") or "").split(",")
    for index, capability in enumerate(gpus.get("capabilities", [])):
        problem = archs[0] and gpu_rules.architecture_problem(tuple(capability), str(index), archs)
        if problem:
            named.append(Culprit(where, problem))
            break
    return named


def unordered_pairs(pairs: dict[tuple[str, str], dict]) -> list[tuple[str, str]]:
    """Each pair of hosts once, (a, b) with a before b, in the order measured."""
    return list(dict.fromkeys(tuple(sorted(pair)) for pair in pairs))


def pair_rate(pairs: dict, a: str, b: str) -> float | None:
    """The slower direction of a pair, MB/s; None where one failed."""
    rates = [pairs.get((a, b), {}).get("mb_per_s"), pairs.get((b, a), {}).get("mb_per_s")]
    return None if None in rates else min(rates)


def slow_pairs(pairs: dict[tuple[str, str], dict]) -> tuple[list[tuple[str, str]], float]:
    """The pairs below SLOW_PAIR_SHARE of the median pair (with three pairs
    or more: two hosts have no median to fall below), and that median."""
    rates = {pair: pair_rate(pairs, *pair) for pair in unordered_pairs(pairs)}
    measured = [rate for rate in rates.values() if rate is not None]
    if len(measured) < 3:
        return [], 0.0
    median = statistics.median(measured)
    return [pair for pair, rate in rates.items()
            if rate is not None and rate < SLOW_PAIR_SHARE * median], median


def median_pair(pairs: dict[tuple[str, str], dict], slow: list[tuple[str, str]],
                median: float) -> tuple[str, str]:
    """The measured pair, of those not slow, whose rate is nearest the median
    (slow_pairs'): the yardstick a slow pair is measured again beside. Where
    a pair is slow there is one: half the pairs run at the median or above."""
    rates = {pair: pair_rate(pairs, *pair) for pair in unordered_pairs(pairs)}
    return min((pair for pair, rate in rates.items() if rate is not None and pair not in slow),
               key=lambda pair: abs(rates[pair] - median))


def cleared_pairs(again: dict[tuple[str, str], dict], slow: list[tuple[str, str]],
                  reference: tuple[str, str]) -> list[tuple[str, str]]:
    """The slow pairs that, measured again alone, reach SLOW_PAIR_SHARE of
    the reference pair measured alone right after them: a host busy with
    other work slows every pair alike, so a pair slow only on its own
    first look is not named."""
    yardstick = pair_rate(again, *reference)
    if yardstick is None:
        return []
    return [pair for pair in slow
            if (rate := pair_rate(again, *pair)) is not None
            and rate >= SLOW_PAIR_SHARE * yardstick]


def the_faster_of(first: dict[tuple[str, str], dict], again: dict[tuple[str, str], dict],
                  ) -> dict[tuple[str, str], dict]:
    """Each direction measured twice keeps its faster measurement: a pair is
    slow when it is slow both times, not when one moment was busy."""
    kept = dict(first)
    for way, result in again.items():
        if (result.get("mb_per_s") or 0) > (first.get(way, {}).get("mb_per_s") or 0):
            kept[way] = result
    return kept


def pair_culprits(pairs: dict[tuple[str, str], dict],
                  cleared: list[tuple[str, str]] = ()) -> list[Culprit]:
    """A pair that fails, loses datagrams, or runs below SLOW_PAIR_SHARE of
    the median pair (slow_pairs), unless its second look cleared it."""
    named = []
    slow, median = slow_pairs(pairs)
    slow = [pair for pair in slow if pair not in cleared]
    for a, b in unordered_pairs(pairs):
        where = f"pair {a}-{b}"
        failed = [f"{x} to {y}: {pairs[(x, y)]['error']}" for x, y in ((a, b), (b, a))
                  if (x, y) in pairs and pairs[(x, y)].get("error")]
        if failed:
            named.append(Culprit(where, f"cannot send {'; '.join(failed)}"))
            continue
        lost = {f"{x} to {y}": pairs[(x, y)]["lost"] for x, y in ((a, b), (b, a))
                if pairs.get((x, y), {}).get("lost", 0) > LOST_SHARE}
        if lost:
            named.append(Culprit(where, "loses datagrams (" + ", ".join(
                f"{share:.0%} {way}" for way, share in lost.items()) + "): a faulty link, "
                "cable or switch port between them, or a congested one"))
        if (a, b) in slow:
            named.append(Culprit(where, f"{pairs[(a, b)]['mb_per_s']:,.0f} MB/s {a} to {b} and "
                                        f"{pairs[(b, a)]['mb_per_s']:,.0f} MB/s {b} to {a}, below "
                                        f"half the median pair's {median:,.0f} MB/s: a slow link "
                                        "between them (its speed, cable, switch port, a shaping "
                                        "qdisc, MTU); every allreduce waits for it"))
    return named


def clock_culprits(clocks: dict[str, tuple[float, float]]) -> list[Culprit]:
    named = []
    for node, (offset, uncertainty) in clocks.items():
        if abs(offset) - uncertainty > CLOCK_SKEW_S:
            named.append(Culprit(f"host {node}", f"its clock is {abs(offset):.1f} s "
                                                 f"{'ahead of' if offset > 0 else 'behind'} "
                                                 "this host's: timelines and logs will not line "
                                                 "up (run chrony or ntpd on every host)"))
    return named


def verdicts(found: Findings, job: Job, min_shm: float, min_free: float) -> list[Culprit]:
    named = [ssh_culprit(host, problem) for host, problem in found.reach.items() if problem]
    for host in found.hosts:
        if host.name in found.facts:
            named += host_culprits(host, found.facts[host.name], found.here, min_shm, min_free,
                                   job.cpu_only)
    if found.network_error:
        named.append(Culprit("network", found.network_error))
    named += pair_culprits(found.pairs, found.cleared_pairs) + clock_culprits(found.clocks)
    if found.allreduce_error:
        named.append(Culprit("allreduce", found.allreduce_error))
    return named


# --- running the checks ------------------------------------------------------------

def read_facts(command: list[str], timeout_s: float = FACTS_TIMEOUT_S) -> dict:
    """One host's facts, or {"error": why not}."""
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"no facts within {timeout_s:.0f} s"}
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        said = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        return {"error": "cannot run the job's Python in the job's directory there ("
                         f"{said[-1] if said else f'exit {result.returncode}'})"}
    return json.loads(lines[-1])


def facts_command(node: str, workdir: Path) -> list[str]:
    return ["-m", "horovod_train.launch.host_facts", "--node", node, "--workdir", str(workdir)]


def gather_host_facts(job: Job, found: Findings) -> None:
    """ssh and the facts, every host at once, into `found`."""
    login_s = hosts.login_timeout_s()

    def one(host: str) -> tuple[str | None, dict | None]:
        problem = hosts.check_host(host, job.ssh_port, job.identity, login_s)
        if problem:
            return problem, None
        return None, read_facts(hosts.python_on(host, job.ssh_port, job.identity,
                                                facts_command(host, job.workdir), job.checkout))

    if job.srun:
        results = slurm_facts(job)
    else:
        answers = hosts.on_every_host(one, job.names,
                                       hosts.check_deadline_s(login_s) + FACTS_TIMEOUT_S)
        results = {}
        for host in job.hosts:
            answer = answers.get(host.name, hosts.Failed("no answer to the checks in time"))
            results[host.name] = (answer.message, None) if isinstance(answer, hosts.Failed) \
                else answer
    for name, (problem, facts) in results.items():
        found.reach[name] = problem
        if facts is not None:
            found.facts[name] = facts


def slurm_facts(job: Job) -> dict[str, tuple[None, dict]]:
    """The facts of every node of the allocation, one Slurm task on each."""
    names = job.names
    command = allocation.on_each_node(names, job.checkout, ["-m", "horovod_train.launch.host_facts",
                                                            "--workdir", str(job.workdir)])
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=FACTS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {name: (None, {"error": f"no facts within {FACTS_TIMEOUT_S} s"}) for name in names}
    heard = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            facts = json.loads(line)
            heard[facts["node"]] = facts
    return {name: (None, heard.get(name) or {"error": "its Slurm task said nothing ("
                                                      f"srun exit {result.returncode})"})
            for name in names}


def check_network(job: Job, found: Findings) -> network.Choice | None:
    """The job's network (chosen, or the named one checked), then every
    pair on it and every clock, in the same probe."""
    timeouts = network.ProbeTimeouts(whole_s=PROBE_TIMEOUT_S)

    def then(step, hello, choice):
        found.pairs = network.check_pairs(step, hello, choice, timeouts.connect_s)
        # A slow pair is measured once more, alone, before it is named, and
        # the pair at the median right after it, alone too: on a busy host
        # one measurement can fall on a busy moment, and a host kept busy
        # slows every pair alike.
        slow, median = slow_pairs(found.pairs)
        if slow:
            reference = median_pair(found.pairs, slow, median)
            again = network.check_pairs(step, hello, choice, timeouts.connect_s,
                                        only=[*slow, reference])
            found.cleared_pairs = cleared_pairs(again, slow, reference)
            found.pairs = the_faster_of(found.pairs, again)
        found.clocks = network.clock_offsets(step, timeouts.connect_s)

    try:
        choice = pipeline.probe_network(job, None, timeouts, then)
    except RunFailed as err:
        found.network_error = str(err)
        return None
    found.network = choice.said
    found.network_error = pipeline.mpi_problem(job, choice)
    return choice


def allreduce_command(job: Job, choice: network.Choice | None) -> list[str]:
    if job.srun:
        return ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", f"--ntasks={job.num_proc}",
                f"--chdir={job.checkout}", sys.executable, "-m",
                "horovod_train.torch.allreduce_check", *(["--no-cuda"] if job.cpu_only else [])]
    return [starters.horovodrun_path(), *starters.horovodrun_options(job, choice),
            sys.executable, "-m", "horovod_train.torch.allreduce_check",
            *(["--no-cuda"] if job.cpu_only else [])]


def allreduce_environment(choice: network.Choice | None, srun: bool) -> dict:
    """As the job's ranks get it."""
    env = dict(os.environ)
    return {**env, **pipeline.rank_environment("srun" if srun else "horovodrun", choice, env)}


def check_allreduce(job: Job, choice: network.Choice | None, found: Findings) -> None:
    command = allreduce_command(job, choice)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, stdin=subprocess.DEVNULL, start_new_session=True,
                               cwd=job.checkout,
                               env=allreduce_environment(choice, job.srun))
    try:
        output, _ = process.communicate(timeout=ALLREDUCE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.communicate()
        found.allreduce_error = (f"{job.num_proc} ranks did not finish within "
                                 f"{ALLREDUCE_TIMEOUT_S} s")
        return
    said = [line.split("allreduce: ", 1)[1] for line in output.splitlines()
            if "allreduce: {" in line]
    if process.returncode != 0 or not said:
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        telling = [line for line in lines if "rror" in line] or lines
        found.allreduce_error = (f"{job.num_proc} ranks failed (exit {process.returncode}): "
                                 f"{telling[-1][:300] if telling else 'no output'}")
        return
    try:
        # The object alone: another rank's output may follow it on the line.
        found.allreduce = json.JSONDecoder().raw_decode(said[-1])[0]
    except ValueError:
        found.allreduce_error = f"unreadable result from rank 0: {said[-1][:200]}"


def run_checks(job: Job, allreduce: bool = True) -> Findings:
    started = time.monotonic()
    found = Findings(list(job.hosts), host_facts.facts("here", job.workdir, job.checkout))

    def timed(phase: str, work, *args):
        begun = time.monotonic()
        result = work(*args)
        found.phases[phase] = round(time.monotonic() - begun, 2)
        return result

    timed("hosts", gather_host_facts, job, found)
    reached = [host for host in job.hosts if host.name in found.facts
               and "error" not in found.facts[host.name]]
    choice = None
    if len(reached) == len(job.hosts) and job.remote:
        choice = timed("network", check_network, job, found)
    # The allreduce only where the rest passed: on a host with another
    # build or checkout it would fail in ways the lines above already name.
    if allreduce and not verdicts(found, job, 0, 0):
        timed("allreduce", check_allreduce, job, choice, found)
    found.seconds = time.monotonic() - started
    return found


# --- output ------------------------------------------------------------------------

def mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}"


def table(found: Findings) -> str:
    lines = ["host        ssh  commit        python   horovod           GPUs  shm MiB  "
             "free GiB  clock s"]
    for host in found.hosts:
        facts = found.facts.get(host.name, {})
        ok = "no" if found.reach.get(host.name) else "yes"
        if not facts or "error" in facts:
            lines.append(f"{host.name:<11} {ok:<4} " + (facts.get("error", "-")[:60]))
            continue
        commit = facts["checkout"].get("commit", "none")[:12]
        build = facts["horovod"].get("digest") or "none"
        clock = found.clocks.get(host.name)
        count = facts["gpus"].get("count", 0) if facts["gpus"] else "-"
        free = facts.get("free_bytes")
        lines.append(f"{host.name:<11} {ok:<4} {commit:<13} {facts['python']:<8} {build:<17} "
                     f"{count!s:<5} {mib(facts.get('shm_bytes')):>7}  "
                     f"{'-' if free is None else f'{free / GIB:,.1f}':>8}  "
                     f"{'-' if clock is None else f'{clock[0]:+.3f}':>7}")
    if found.network:
        lines.append(f"network: {found.network}")
    if found.pairs:
        lines.append("pair        MB/s there  MB/s back  RTT ms  lost")
        for a, b in sorted(unordered_pairs(found.pairs)):
            there, back = found.pairs.get((a, b), {}), found.pairs.get((b, a), {})
            rate = [f"{r['mb_per_s']:,.0f}" if r.get("mb_per_s") else "failed"
                    for r in (there, back)]
            rtt = there.get("rtt_ms")
            lost = max(there.get("lost", 0), back.get("lost", 0))
            lines.append(f"{a + '-' + b:<11} {rate[0]:>10}  {rate[1]:>9}  "
                         f"{'-' if rtt is None else f'{rtt:.2f}':>6}  {lost:.0%}")
    if found.allreduce:
        lines.append(allreduce_line(found))
    return "\n".join(lines)


def slowest_link_gbit(found: Findings) -> float | None:
    rates = [pair_rate(found.pairs, *pair) for pair in found.pairs]
    rates = [rate for rate in rates if rate]
    return min(rates) * 8 / 1000 if rates else None


def allreduce_line(found: Findings) -> str:
    largest = found.allreduce["sizes"][-1]
    link = slowest_link_gbit(found)
    share = (f", {largest['busbw_gbps'] * 8 / link:.0%} of the slowest pair's "
             f"{link:,.2f} Gbit/s" if link else "")
    return (f"allreduce: {found.allreduce['ranks']} ranks ({found.allreduce['controller']}, "
            f"{found.allreduce['device']}), {largest['mb']} MB: bus bandwidth "
            f"{largest['busbw_gbps'] * 8:,.2f} Gbit/s{share}")


def as_json(found: Findings, named: list[Culprit]) -> dict:
    link = slowest_link_gbit(found)
    return {"ok": not named, "seconds": round(found.seconds, 2), "phases": found.phases,
            "culprits": [{"where": c.where, "what": c.what} for c in named],
            "hosts": {h.name: {"slots": h.slots, "ssh": found.reach.get(h.name),
                               "facts": found.facts.get(h.name)} for h in found.hosts},
            "network": found.network,
            "pairs": [{"from": a, "to": b, **result} for (a, b), result in found.pairs.items()],
            "cleared_pairs": [list(pair) for pair in found.cleared_pairs],
            "clocks": {node: {"offset_s": offset, "uncertainty_s": uncertainty}
                       for node, (offset, uncertainty) in found.clocks.items()},
            "allreduce": found.allreduce, "slowest_pair_gbit": link}


# --- the command -------------------------------------------------------------------

def parse_args(argv: list[str]):
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("-H", "--hosts", help="HOST:SLOTS,... as horovodrun's -H")
    where.add_argument("--hostfile", "-hostfile", help="a hostfile (hostfiles/README.md)")
    where.add_argument("--slurm", action="store_true",
                       help="the hosts of the Slurm job this runs in; node commands by srun")
    parser.add_argument("-np", "--num-proc", type=int, default=None,
                        help="the job's ranks, for the allreduce (default: every slot)")
    parser.add_argument("-p", "--ssh-port", type=int, default=None,
                        help="the hosts' SSH port (default: ssh's configuration)")
    parser.add_argument("-i", "--ssh-identity-file", default=None)
    parser.add_argument("--network-interface", "--network-interfaces", dest="network",
                        default=None, help="the job's network, checked as launch.sh checks it "
                        "(default: HVT_NETWORK_INTERFACE, else chosen)")
    controller = parser.add_mutually_exclusive_group()
    controller.add_argument("--gloo", dest="controller", action="store_const", const="gloo")
    controller.add_argument("--mpi", dest="controller", action="store_const", const="mpi")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the job writes, for its free space (default: the "
                             "working directory)")
    parser.add_argument("--min-shm-gb", type=positive_float, default=1.0,
                        help="the least /dev/shm a host may have (GiB; default 1)")
    parser.add_argument("--min-free-gb", type=positive_float, default=1.0,
                        help="the least free disk in --workdir (GiB; default 1)")
    parser.add_argument("--no-cuda", dest="cpu_only", action="store_true",
                        help="the job trains on the CPU (the trainer's --no-cuda): the GPUs "
                             "are not checked, the allreduce sums CPU tensors")
    parser.add_argument("--no-allreduce", dest="allreduce", action="store_false",
                        help="skip the allreduce over the job's ranks")
    parser.add_argument("--json", action="store_true",
                        help="print the findings as JSON instead of the table")
    return parser.parse_args(argv)


def job_from_args(args) -> Job:
    if args.slurm:
        listed = list(allocation.allocation_from_env(dict(os.environ)).hosts)
    elif args.hosts:
        listed = hosts.parse_host_list(args.hosts)
    else:
        listed = hosts.read_hostfile(args.hostfile)
    num_proc = args.num_proc or hosts.total_slots(listed)
    hosts.check_process_count(num_proc, listed, "the hosts")
    return Job(tuple(listed), num_proc, args.ssh_port, args.ssh_identity_file,
               named_network(args.network, dict(os.environ)), args.controller, args.cpu_only,
               "srun" if args.slurm else "horovodrun", args.slurm,
               workdir=(args.workdir or Path.cwd()).absolute())


def report(found: Findings, named: list[Culprit], json_out: bool) -> int:
    if json_out:
        print(json.dumps(as_json(found, named), indent=1))
    else:
        print(table(found))
    for culprit in named:
        print(f"{PROG}: {culprit}", file=sys.stderr)
    verdict = (f"{len(named)} problem{'s' * (len(named) != 1)}" if named else "all well")
    phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in found.phases.items())
    print(f"{PROG}: {verdict}, {len(found.hosts)} hosts checked in {found.seconds:.1f} s"
          + (f" ({phases})" if phases else ""),
          file=sys.stderr if named else sys.stdout, flush=True)
    return 1 if named else 0


def run(job: Job, allreduce: bool = True, json_out: bool = False, min_shm: float = 1.0,
        min_free: float = 1.0) -> None:
    """The checks, their table and a line per culprit; a RunFailed (its
    lines said, exit 1) where something is named."""
    found = run_checks(job, allreduce)
    if report(found, verdicts(found, job, min_shm, min_free), json_out):
        raise RunFailed("the preflight named a problem", said=True)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    run(job_from_args(args), args.allreduce, args.json, args.min_shm_gb, args.min_free_gb)
    return 0


def cli() -> None:
    run_main(lambda: main(sys.argv[1:]), prog=PROG)


if __name__ == "__main__":
    cli()

"""Throughput of one workload on a matrix of layouts, with Horovod and with
torchrun + DDP side by side. Run it through benchmarks/run_matrix.sh;
benchmarks/scaling_tables.py turns the runs into results.json,
scaling.csv, scaling.md and scaling.png.

A layout NxG is N nodes with G ranks (GPUs) each. Every run has the same
batch per rank (weak scaling), a fixed number of warm-up and timed steps and
is repeated; a layout's figure is the median of its repeats. The workload is
the project's trainer (MNIST or synthetic images), or your own command
(--command), run by horovodrun on each layout as it is; its figure is the
throughput it prints, read by --throughput-pattern (by default the line of
Horovod's synthetic benchmarks, "Total img/sec on 4 GPU(s): 1234.5"). A layout that
fails (no hostfile, too few slots, host unreachable, the run's own error)
gets its one-line reason in the tables; the other layouts still run.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import CHECKOUT, scaling_tables
from benchmarks.machine import machine_record
from horovod_train.core import runtime
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.launch.hosts import Host, host_list, is_local, read_hostfile
from horovod_train.launch.pipeline import is_python
from horovod_train.torch import options as torch_options
from horovod_train.torch.model_names import MNIST_MODELS

EMULATE = CHECKOUT / "scripts" / "emulate_cluster.sh"
TRAINER = CHECKOUT / "horovod_train" / "pytorch_mnist.py"
DDP = CHECKOUT / "benchmarks" / "ddp_benchmark.py"
SCHEMA_VERSION = 1
# The line Horovod's synthetic benchmarks end with: the whole job's images/s.
HOROVOD_BENCHMARK_LINE = r"Total img/sec on \d+ \S+: ([0-9.]+)"
# The options that shape the project's trainer's runs: --command runs a
# command as it is, so none of them applies to it.
TRAINER_OPTIONS = ("workload", "model", "image_size", "memory_format", "amp", "batch_size",
                   "warmup_steps", "steps", "data_dir", "no_cuda", "threads", "fp16_allreduce")
LAYOUT = re.compile(r"^(\d+)x(\d+)$")


def parse_layouts(text: str) -> tuple[tuple[int, int], ...]:
    layouts = []
    for item in text.split(","):
        match = LAYOUT.match(item.strip())
        if not match or int(match[1]) < 1 or int(match[2]) < 1:
            raise UserError(f"layout {item.strip()!r}: want NODESxGPUS such as 2x4")
        layouts.append((int(match[1]), int(match[2])))
    return tuple(layouts)


# --- settings ----------------------------------------------------------------
# Built once from the command line by parse_args, which checks the options
# against each other; the functions below take the part they need.

@dataclass(frozen=True)
class Workload:
    """What every run trains, the same for both launchers' trainers."""
    kind: str  # "mnist" (from data_dir), "synthetic" images, or "command" (yours)
    model: str
    image_size: int  # of the synthetic images; MNIST's are 28
    memory_format: str
    amp: str
    batch_per_rank: int
    warmup_steps: int
    steps: int  # timed, per run
    data_dir: Path
    cpu_only: bool  # --no-cuda
    threads: int | None  # per rank; None leaves the trainers' choice
    command: tuple[str, ...] = ()  # kind "command": what horovodrun runs on every rank
    throughput_pattern: str = HOROVOD_BENCHMARK_LINE  # its first group: the job's figure


@dataclass(frozen=True)
class HorovodTuning:
    """horovodrun's choices for the Horovod runs; None leaves its default."""
    controller: str  # "auto", "gloo" or "mpi"
    fp16_allreduce: bool
    fusion_threshold_mb: int | None
    cycle_time_ms: float | None


@dataclass(frozen=True)
class Cluster:
    """Where a layout's nodes come from and how they are reached."""
    hosts: tuple[str, ...] | None  # --hosts; None: the layout's hostfile
    hostfile_dir: Path
    ssh_port: int | None  # --ssh-port; None: ssh's own configuration decides
    emulate: bool  # the emulated hosts a and b on this machine
    link_rate: str | None  # the emulated link's shaping, e.g. 1gbit
    link_delay: str | None

    @property
    def shaped(self) -> bool:
        return bool(self.link_rate or self.link_delay)


@dataclass(frozen=True)
class MatrixSettings:
    command: str  # as typed, for the tables
    layouts: tuple[tuple[int, int], ...]
    launchers: tuple[str, ...]  # "horovod", "ddp"
    repeats: int
    timeout_s: float  # per run
    out_dir: Path
    device: str  # "cuda" or "cpu", for every run
    gpus: int  # on this machine
    workload: Workload
    horovod: HorovodTuning
    cluster: Cluster


# --- hosts -------------------------------------------------------------------

def layout_hosts(settings: MatrixSettings, nodes: int, per_node: int) -> list[str]:
    """The node names of a layout: the first N of --hosts, or those of
    hostfiles/NxG, checked to have the slots the layout needs. Hostfile
    names this machine cannot resolve (the emulated a and b, typed bare on
    one machine) leave a one-node layout to this machine and stop a
    larger one with a line saying how to run it; with --emulate the names
    resolve on host a, where the launchers run."""
    cluster = settings.cluster
    if cluster.hosts:
        if len(cluster.hosts) < nodes:
            raise UserError(f"needs {nodes} hosts, --hosts gives {len(cluster.hosts)}")
        names = list(cluster.hosts[:nodes])
    else:
        path = cluster.hostfile_dir / scaling_tables.layout_name(nodes, per_node)
        if not path.is_file():
            raise UserError(f"no hostfile {path}")
        listed = read_hostfile(path)
        if len(listed) < nodes:
            raise UserError(f"{path} lists {len(listed)} hosts, the layout needs {nodes}")
        for host in listed[:nodes]:
            if host.slots < per_node:
                raise UserError(f"{path}: {host.name} has {host.slots} slots, "
                                f"the layout needs {per_node}")
        names = [host.name for host in listed[:nodes]]
        unknown = [] if cluster.emulate else [name for name in names if not resolves(name)]
        if unknown and nodes == 1:
            names = ["localhost"]
        elif unknown:
            raise UserError(
                f"needs {nodes} nodes, and {path.name} names {', '.join(unknown)}, unknown here: "
                f"name your nodes with --hosts, list them in {path}, or emulate two hosts on "
                "this machine with --emulate")
    if (all(is_local(name) for name in names) and settings.device == "cuda"
            and per_node > settings.gpus):
        raise UserError(f"needs {per_node} GPUs per node, this machine has {settings.gpus} "
                        "(NCCL takes one GPU per rank)")
    return names


def resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return True


# --- commands ----------------------------------------------------------------

def workload_args(workload: Workload, run_dir: Path) -> list[str]:
    command = ["--benchmark-steps", str(workload.steps),
               "--warmup-steps", str(workload.warmup_steps),
               "--batch-size", str(workload.batch_per_rank), "--model", workload.model,
               "--memory-format", workload.memory_format, "--amp", workload.amp,
               "--log-dir", str(run_dir)]
    if workload.kind == "synthetic":
        command += ["--synthetic", "--image-size", str(workload.image_size)]
    else:
        command += ["--data-dir", str(workload.data_dir), "--no-download"]
    if workload.cpu_only:
        command.append("--no-cuda")
    if workload.threads:
        command += ["--threads", str(workload.threads)]
    return command


def controller(settings: MatrixSettings, nodes: int) -> str | None:
    """horovodrun's controller for a layout; None leaves horovodrun's choice
    (MPI where Open MPI is installed). With CPU tensors the controller also
    carries the gradients. Across hosts the resnets' tens of MB a step are
    limited by the link, which Gloo's TCP fills more steadily than Open
    MPI's; the MNIST networks' under 1 MB are limited by latency, where
    Horovod's negotiation costs less over MPI (the figures: docs/benchmarks.md).
    Within a host MPI's shared memory wins. On GPUs NCCL carries the
    gradients either way."""
    if settings.horovod.controller != "auto":
        return settings.horovod.controller
    if settings.workload.kind == "command":
        return None  # nothing is known of its gradients
    bandwidth_bound = settings.workload.model not in MNIST_MODELS
    return "gloo" if settings.device == "cpu" and nodes > 1 and bandwidth_bound else None


def horovod_command(settings: MatrixSettings, hosts: list[str], per_node: int,
                    run_dir: Path) -> list[list[str]]:
    tuning = settings.horovod
    command = [str(Path(sys.executable).parent / "horovodrun"),
               "-np", str(len(hosts) * per_node),
               "-H", host_list([Host(name, per_node) for name in hosts]),
               *port_option(settings.cluster)]
    chosen = controller(settings, len(hosts))
    if chosen:
        command.append(f"--{chosen}")
    # Horovod's tensor fusion: gradients are batched into buffers of up to
    # this many MB, sent once per cycle; 0 sends each tensor on its own.
    if tuning.fusion_threshold_mb is not None:
        command += ["--fusion-threshold-mb", str(tuning.fusion_threshold_mb)]
    if tuning.cycle_time_ms is not None:
        command += ["--cycle-time-ms", str(tuning.cycle_time_ms)]
    if settings.workload.kind == "command":
        return [command + user_command(settings.workload.command)]
    command += [sys.executable, str(TRAINER), *workload_args(settings.workload, run_dir)]
    if tuning.fp16_allreduce:
        command.append("--fp16-allreduce")
    return [command]


def user_command(argv: tuple[str, ...]) -> list[str]:
    """--command as horovodrun runs it: a bare python is this environment's
    (the venv's, or the image's), as in the Slurm job."""
    first = argv[0]
    return [sys.executable if "/" not in first and is_python(first) else first, *argv[1:]]


def command_throughput(log_path: Path, pattern: str) -> float:
    """The figure of a --command run: the first group of the last line of
    its output that the pattern matches."""
    found = re.findall(pattern, log_path.read_text(errors="replace"))
    if not found:
        raise RunFailed(f"its output has no line matching --throughput-pattern {pattern!r}")
    last = found[-1][0] if isinstance(found[-1], tuple) else found[-1]
    try:
        return float(last)
    except ValueError:
        raise RunFailed(f"--throughput-pattern {pattern!r} matched {last!r}, not a number") \
            from None


def ddp_commands(settings: MatrixSettings, hosts: list[str], per_node: int, run_dir: Path,
                 port: int) -> list[list[str]]:
    """One torchrun per node, over ssh unless the node is this host; node 0
    is the rendezvous."""
    commands = []
    for node_rank, host in enumerate(hosts):
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)),
                    "--node-rank", str(node_rank), "--nproc-per-node", str(per_node),
                    "--master-addr", hosts[0], "--master-port", str(port),
                    str(DDP), *workload_args(settings.workload, run_dir)]
        if is_local(host) and len(hosts) == 1:
            commands.append(torchrun)
        else:
            remote = f"cd {shlex.quote(os.getcwd())} && exec {shlex.join(torchrun)}"
            commands.append(ssh(settings.cluster, host) + [remote])
    return commands


def port_option(cluster: Cluster) -> list[str]:
    """`-p PORT` for horovodrun, ssh and the hosts' check when --ssh-port
    was given; else nothing, and ssh's configuration decides (the rule:
    launch/hosts.py)."""
    return ["-p", str(cluster.ssh_port)] if cluster.ssh_port is not None else []


def ssh(cluster: Cluster, host: str) -> list[str]:
    return ["ssh", *port_option(cluster), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            host]


def on_cluster(cluster: Cluster, command: list[str]) -> list[str]:
    """With --emulate, every command starts on emulated host a."""
    return [str(EMULATE), "exec", "a", "--", *command] if cluster.emulate else command


# --- running -----------------------------------------------------------------

def run_processes(commands: list[list[str]], timeout_s: float, log_path: Path) -> str | None:
    """Run the commands side by side; None when all exit 0, else the reason."""
    with open(log_path, "wb") as log:
        procs = [subprocess.Popen(c, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True) for c in commands]
        deadline = time.monotonic() + timeout_s
        reason = None
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                reason = (f"exit {failed[0].returncode}" if failed
                          else f"timed out after {timeout_s:.0f} s")
                break
            time.sleep(0.2)
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if reason is None:
            bad = [p for p in procs if p.returncode != 0]
            reason = f"exit {bad[0].returncode}" if bad else None
    return reason


def error_line(log_path: Path) -> str:
    """The most telling line of a failed run's output: a line saying
    'error', else the last non-empty one."""
    lines = [re.sub(r"^\[\d+\]<std(out|err)>:", "", line).strip()
             for line in log_path.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if re.search(r"\w", line)]  # not ===== rules
    for line in lines:
        if re.search(r"error:|unreachable|Permission denied|Could not resolve|"
                     r"terminate called|Signal \d+ \(SIG", line):
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def check_reachable(cluster: Cluster, hosts: list[str]) -> None:
    """hosts.check_reachable, the launcher's check, run where horovodrun and
    torchrun will run: on emulated host a with --emulate, whose names
    resolve only there."""
    command = [sys.executable, "-m", "horovod_train.launch.hosts", *port_option(cluster),
               *hosts]
    result = subprocess.run(on_cluster(cluster, command), cwd=CHECKOUT, capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit {result.returncode}"]
        failure = UserError if result.returncode == 2 else RunFailed
        raise failure(lines[-1].removeprefix("hosts: error: "))


def new_run(settings: MatrixSettings, launcher: str, nodes: int, per_node: int, repeat: int,
            reason: str | None = None, hosts: list[str] | None = None) -> dict:
    """A run's record, failed until it reports its figures."""
    return {"layout": scaling_tables.layout_name(nodes, per_node), "nodes": nodes,
            "ranks_per_node": per_node, "ranks": nodes * per_node, "hosts": hosts,
            "launcher": launcher, "repeat": repeat, "status": "failed", "reason": reason,
            "oversubscribed": oversubscribed(settings, nodes, per_node)}


def run_once(settings: MatrixSettings, launcher: str, hosts: list[str], per_node: int,
             repeat: int, port: int) -> dict:
    run = new_run(settings, launcher, len(hosts), per_node, repeat, hosts=hosts)
    run_dir = settings.out_dir / "runs" / f"{run['layout']}-{launcher}-{repeat}"
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        check_reachable(settings.cluster, hosts)
    except (UserError, RunFailed, subprocess.TimeoutExpired) as err:
        run["reason"] = str(err)
        return run
    if launcher == "horovod":
        commands = horovod_command(settings, hosts, per_node, run_dir)
    else:
        commands = ddp_commands(settings, hosts, per_node, run_dir, port)
    commands = [on_cluster(settings.cluster, c) for c in commands]
    (run_dir / "command.txt").write_text("\n".join(shlex.join(c) for c in commands) + "\n")
    log_path = run_dir / "output.log"
    started = time.monotonic()
    failure = run_processes(commands, settings.timeout_s, log_path)
    run["wall_time_s"] = time.monotonic() - started
    if failure:
        if launcher == "ddp" and len(hosts) > 1:
            cleanup_remote(settings.cluster, hosts, run_dir)
        run["reason"] = f"{failure}: {error_line(log_path)}"
        return run
    if settings.workload.kind == "command":
        try:
            rate = command_throughput(log_path, settings.workload.throughput_pattern)
        except RunFailed as err:
            run["reason"] = str(err)
            return run
        run.update(status="ok", per_rank=None, images_per_sec=rate, step_time_s=None,
                   allreduce_time_s=None, parameters=None, gradient_bytes=None, amp=None,
                   device=settings.device, controller=controller(settings, len(hosts)))
        return run
    try:
        record = json.loads((run_dir / "benchmark.json").read_text())
    except (OSError, ValueError) as err:
        run["reason"] = f"no benchmark.json: {err}"
        return run
    run.update(status="ok", per_rank=record["per_rank"],
               images_per_sec=record["images_per_sec"], step_time_s=record["step_time_s"],
               allreduce_time_s=record["allreduce_time_s"],
               parameters=record["parameters"], gradient_bytes=record["gradient_bytes"],
               amp=record["amp"],
               device=record["device"], controller=record["controller"])
    return run


def cleanup_remote(cluster: Cluster, hosts: list[str], run_dir: Path) -> None:
    """torchrun on the other nodes would wait for the dead one until its own
    timeout: end every process of this run, found by its run directory."""
    for host in hosts:
        command = ["pkill", "-f", str(run_dir)] if is_local(host) else (
            ssh(cluster, host) + [f"pkill -f {shlex.quote(str(run_dir))}"])
        subprocess.run(on_cluster(cluster, command), capture_output=True, timeout=60)


def oversubscribed(settings: MatrixSettings, nodes: int, per_node: int) -> bool:
    """More ranks than devices: GPUs per node on GPU runs; on CPU runs the
    cores of a node, or of this machine for emulated nodes (which share it)."""
    if settings.device == "cuda":
        return per_node > settings.gpus
    cores = os.cpu_count() or 1
    return (nodes * per_node if settings.cluster.emulate else per_node) > cores


# --- environment -------------------------------------------------------------

def environment(settings: MatrixSettings) -> dict:
    """The software the runs used and the network between the nodes (the
    hardware: machine.machine_record)."""
    import horovod
    import torch

    mpirun = runtime.command_output("mpirun", "--version")
    cuda = settings.device == "cuda"
    return {
        "network": network(settings.cluster),
        "python": platform.python_version(),
        "torch": torch.__version__,
        # The GPU stack the runs used; null on CPU runs.
        "cuda": torch.version.cuda if cuda else None,
        "nccl": ".".join(str(part) for part in torch.cuda.nccl.version()) if cuda else None,
        "horovod": horovod.__version__,
        "openmpi": mpirun.splitlines()[0] if mpirun else None,
    }


def network(cluster: Cluster) -> dict:
    if cluster.emulate:
        return {"kind": "emulated hosts: veth pairs on a Linux bridge",
                "shaping": {"rate": cluster.link_rate, "delay": cluster.link_delay}
                if cluster.shaped else None}
    route = None
    remote = next((h for h in (cluster.hosts or []) if not is_local(h)), None)
    if remote:
        try:
            route = runtime.command_output("ip", "route", "get", socket.gethostbyname(remote))
        except OSError:
            route = None
    return {"kind": "hosts as given", "route_to_first_remote_host": route}


# --- main --------------------------------------------------------------------

def settings_record(settings: MatrixSettings) -> dict:
    """The settings as results.json records them; parameters and
    gradient_bytes are filled in by the first run that reports them."""
    workload, tuning, cluster = settings.workload, settings.horovod, settings.cluster
    if workload.kind == "command":
        what = {"workload": "command", "user_command": shlex.join(workload.command),
                "throughput_pattern": workload.throughput_pattern}
    else:
        what = {"workload": workload.kind, "model": workload.model,
                "memory_format": workload.memory_format,
                "image_size": workload.image_size if workload.kind == "synthetic" else 28,
                "batch_per_rank": workload.batch_per_rank, "amp": workload.amp,
                "warmup_steps": workload.warmup_steps, "steps": workload.steps}
    return {**what,
            "repeats": settings.repeats, "device": settings.device,
            "launchers": list(settings.launchers), "controller": tuning.controller,
            # The trainer's option: a command carries its own.
            **({} if workload.kind == "command" else {"fp16_allreduce": tuning.fp16_allreduce}),
            "fusion_threshold_mb": tuning.fusion_threshold_mb,
            "cycle_time_ms": tuning.cycle_time_ms,
            "emulate": cluster.emulate,
            "network": ({"rate": cluster.link_rate, "delay": cluster.link_delay}
                        if cluster.shaped else None),
            "parameters": None, "gradient_bytes": None}


def run_matrix(settings: MatrixSettings) -> dict:
    out_dir, launchers = settings.out_dir, list(settings.launchers)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {"schema_version": SCHEMA_VERSION,
               "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "command": settings.command,
               "machine": machine_record(),
               "settings": settings_record(settings), "environment": environment(settings),
               "runs": []}
    port = 29400 + os.getpid() % 500  # torchrun rendezvous; a new one per run below
    for nodes, per_node in settings.layouts:
        layout = scaling_tables.layout_name(nodes, per_node)
        try:
            hosts = layout_hosts(settings, nodes, per_node)
        except UserError as err:
            # One line for the layout; a failed run per launcher for the tables.
            print(f"{layout}: not run: {err}", flush=True)
            results["runs"] += [new_run(settings, launcher, nodes, per_node, 0, reason=str(err))
                                for launcher in launchers]
            continue
        # The launchers take turns, repeat by repeat, so that a slow spell of
        # a shared machine falls on both and their ratio stays fair.
        for repeat in range(settings.repeats):
            for launcher in launchers:
                port += 1
                run = run_once(settings, launcher, hosts, per_node, repeat, port)
                results["runs"].append(run)
                print(progress_line(run), flush=True)
                if run["status"] == "ok":
                    results["settings"]["parameters"] = run["parameters"]
                    results["settings"]["gradient_bytes"] = run["gradient_bytes"]
            if all("wall_time_s" not in run for run in results["runs"][-len(launchers):]):
                break  # no run started (hosts unreachable): every repeat would fail the same way
        results["rows"] = scaling_tables.summarize(results["runs"], settings.layouts, launchers)
        scaling_tables.write_outputs(out_dir, results, launchers)  # after each layout
    results["rows"] = scaling_tables.summarize(results["runs"], settings.layouts, launchers)
    scaling_tables.write_outputs(out_dir, results, launchers)
    return results


def progress_line(run: dict) -> str:
    head = f"{run['layout']} {run['launcher']} #{run['repeat'] + 1}:"
    if run["status"] != "ok":
        return f"{head} FAILED: {run['reason']}"
    line = f"{head} {run['images_per_sec']:.1f} images/s over {run['ranks']} ranks"
    return line if run["step_time_s"] is None else f"{line}, step {run['step_time_s'] * 1e3:.1f} ms"


def parse_args(argv: list[str]) -> MatrixSettings:
    """The command line, checked, as the matrix's settings."""
    parser = ArgumentParser(prog="run_matrix.sh", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", default="1x1,1x2,2x2,2x4",
                        help="comma-separated NODESxGPUS (default: %(default)s)")
    parser.add_argument("--hosts", default=None,
                        help="comma-separated node names (a layout uses the first N); "
                             "default: the layout's file under --hostfile-dir")
    parser.add_argument("--hostfile-dir", type=Path, default=CHECKOUT / "hostfiles")
    parser.add_argument("--launchers", default=None,
                        help="horovod, ddp (torchrun + DistributedDataParallel), or both "
                             "(default: both; with --command, horovod)")
    parser.add_argument("--command", default=None, metavar="'python my_bench.py ARGS'",
                        help="your Horovod command as the workload, run by horovodrun on "
                             "each layout as it is; its figure is the throughput it prints "
                             "(--throughput-pattern); the trainer's workload options do "
                             "not apply")
    parser.add_argument("--throughput-pattern", default=None, metavar="REGEX",
                        help="with --command: a regular expression whose first group, in the "
                             "last line of the output it matches, is the job's throughput "
                             "(default: Horovod's synthetic benchmarks' "
                             "'Total img/sec on N GPU(s): X')")
    parser.add_argument("--workload", choices=["mnist", "synthetic"], default="mnist",
                        help="MNIST from --data-dir, or synthetic images (for resnet models)")
    parser.add_argument("--model", default=None,
                        help="mnist_cnn (default for mnist) or resnet50 (default for synthetic), "
                             "resnet18, horovod_example")
    parser.add_argument("--image-size", type=int, default=224, help="synthetic image size")
    parser.add_argument("--memory-format", choices=("channels_last", "contiguous"),
                        default="channels_last",
                        help="layout of both launchers' weights (the trainers' default "
                             "channels_last, or contiguous)")
    parser.add_argument("--amp", choices=torch_options.AMP_CHOICES, default="auto",
                        help="both launchers' precision, as the trainer's --amp: "
                             + torch_options.AMP_HELP)
    parser.add_argument("--batch-size", type=int, default=64, help="images per rank per step")
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=CHECKOUT / "data",
                        help="MNIST in the torchvision layout (MNIST/raw/), downloaded there "
                             "first when missing")
    parser.add_argument("--controller", choices=["auto", "gloo", "mpi"], default="auto",
                        help="horovodrun's controller; auto (the default): Gloo for the "
                             "resnets on several CPU hosts, whose gradients it moves faster "
                             "over TCP, else horovodrun's own choice (MPI)")
    parser.add_argument("--fp16-allreduce", action="store_true",
                        help="compress gradients to fp16 for the allreduce (Horovod runs)")
    parser.add_argument("--fusion-threshold-mb", type=int, default=None, metavar="MB",
                        help="Horovod's tensor fusion buffer (the trainer's default: 4 "
                             "with CPU tensors, else horovodrun's 128; 0 turns fusion off)")
    parser.add_argument("--cycle-time-ms", type=float, default=None, metavar="MS",
                        help="Horovod's cycle time between fused allreduces "
                             "(horovodrun's default 1)")
    parser.add_argument("--no-cuda", action="store_true", help="run on CPUs even with GPUs")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per rank")
    parser.add_argument("--ssh-port", type=int, default=None, metavar="PORT",
                        help="the hosts' SSH port, for horovodrun, ssh and the hosts' "
                             "check (default: what ssh's configuration says, else 22)")
    parser.add_argument("--emulate", action="store_true",
                        help="run on the emulated hosts a and b (scripts/emulate_cluster.sh "
                             "up; brought up here if they are not)")
    parser.add_argument("--link-rate", default=None,
                        help="with --emulate: limit the link between the hosts, e.g. 1gbit")
    parser.add_argument("--link-delay", default=None,
                        help="with --emulate: one-way delay, e.g. 1ms (needs netem)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="default: runs/benchmarks/YYYYmmdd-HHMMSS")
    args = parser.parse_args(argv)
    launchers = tuple(x.strip() for x in (
        args.launchers or ("horovod" if args.command else "horovod,ddp")).split(",") if x.strip())
    if not launchers or set(launchers) - {"horovod", "ddp"}:
        parser.error(f"--launchers {','.join(launchers)}: choose from horovod, ddp")
    command = check_command(parser, args, launchers)
    for name in ("batch_size", "steps", "repeats", "image_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup_steps < 0:
        parser.error("--warmup-steps must be at least 0")
    if args.fusion_threshold_mb is not None and args.fusion_threshold_mb < 0:
        parser.error("--fusion-threshold-mb must be at least 0")
    if args.cycle_time_ms is not None and args.cycle_time_ms <= 0:
        parser.error("--cycle-time-ms must be positive")
    if (args.link_rate or args.link_delay) and not args.emulate:
        parser.error("--link-rate and --link-delay shape the emulated link: add --emulate")
    if args.emulate and args.hosts:
        parser.error("--emulate runs on the emulated hosts a and b: drop --hosts")
    try:
        layouts = parse_layouts(args.layouts)
    except UserError as err:
        parser.error(str(err))
    out_dir = args.out_dir or (Path("runs") / "benchmarks"
                               / datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    gpus = cuda_devices()  # after the checks: torch is slow to import
    return MatrixSettings(
        command=shlex.join(["benchmarks/run_matrix.sh", *argv]),
        layouts=layouts, launchers=launchers, repeats=args.repeats, timeout_s=args.timeout,
        out_dir=out_dir.resolve(),
        device="cuda" if gpus and not args.no_cuda else "cpu", gpus=gpus,
        workload=Workload(
            kind="command" if command else args.workload,
            model=args.model or ("resnet50" if args.workload == "synthetic" else "mnist_cnn"),
            image_size=args.image_size, memory_format=args.memory_format, amp=args.amp,
            batch_per_rank=args.batch_size, warmup_steps=args.warmup_steps, steps=args.steps,
            data_dir=args.data_dir.resolve(), cpu_only=args.no_cuda, threads=args.threads,
            command=command,
            throughput_pattern=args.throughput_pattern or HOROVOD_BENCHMARK_LINE),
        horovod=HorovodTuning(
            controller=args.controller, fp16_allreduce=args.fp16_allreduce,
            fusion_threshold_mb=args.fusion_threshold_mb, cycle_time_ms=args.cycle_time_ms),
        cluster=Cluster(
            hosts=tuple(h.strip() for h in args.hosts.split(",")) if args.hosts else None,
            hostfile_dir=args.hostfile_dir, ssh_port=args.ssh_port, emulate=args.emulate,
            link_rate=args.link_rate, link_delay=args.link_delay))


def check_command(parser, args, launchers: tuple[str, ...]) -> tuple[str, ...]:
    """--command split into words, and its clashes: it runs under horovodrun
    alone, as it is (none of the trainer's workload options), and
    --throughput-pattern is a regular expression with a group."""
    if args.command is None:
        if args.throughput_pattern is not None:
            parser.error("--throughput-pattern reads --command's output: add --command")
        return ()
    try:
        command = tuple(shlex.split(args.command))
    except ValueError as err:
        parser.error(f"--command: {err}")
    if not command:
        parser.error("--command is empty")
    if launchers != ("horovod",):
        parser.error("--command runs under horovodrun: --launchers horovod")
    given = [name for name in TRAINER_OPTIONS if getattr(args, name) != parser.get_default(name)]
    if given:
        parser.error(f"--{given[0].replace('_', '-')} shapes the trainer's runs; --command runs "
                     "your command as it is (put its options in it)")
    pattern = args.throughput_pattern or HOROVOD_BENCHMARK_LINE
    try:
        groups = re.compile(pattern).groups
    except re.error as err:
        parser.error(f"--throughput-pattern {pattern!r}: {err}")
    if groups < 1:
        parser.error(f"--throughput-pattern {pattern!r} has no group: put the figure in (...)")
    return command


def cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()


def emulated_cluster(cluster: Cluster) -> bool:
    """Bring the emulated hosts up unless they are; shape their link. Returns
    whether this run brought them up (and so takes them down)."""
    up = subprocess.run([str(EMULATE), "status"], capture_output=True).returncode != 0
    if up:
        print("run_matrix: bringing up the emulated hosts a and b", flush=True)
        result = subprocess.run([str(EMULATE), "up"], capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
            raise RunFailed(f"emulate_cluster.sh up failed: {detail[0]}")
    if cluster.shaped:
        limits = (["--rate", cluster.link_rate] if cluster.link_rate else []) + (
            ["--delay", cluster.link_delay] if cluster.link_delay else [])
        result = subprocess.run([str(EMULATE), "shape", *limits], capture_output=True,
                                text=True, timeout=60)
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
            raise RunFailed(f"emulate_cluster.sh shape failed: {detail[0]}")
    return up


def main(argv: list[str]) -> int:
    settings = parse_args(argv)
    if settings.workload.kind == "mnist":
        from horovod_train.core import mnist  # numpy: not for --help

        # Once, here, before any run: the timed runs never download.
        mnist.ensure_available(settings.workload.data_dir, ["train", "test"])
    cluster = settings.cluster
    brought_up = emulated_cluster(cluster) if cluster.emulate else False
    try:
        results = run_matrix(settings)
    finally:
        if cluster.emulate and cluster.shaped:
            subprocess.run([str(EMULATE), "shape", "--off"], capture_output=True, timeout=60)
        if brought_up:
            subprocess.run([str(EMULATE), "down"], capture_output=True, timeout=120)
    out_dir = settings.out_dir
    print((out_dir / "scaling.md").read_text(), end="")
    print(f"run_matrix: wrote results.json, scaling.csv, scaling.md, scaling.png in {out_dir}")
    if all(row["status"] != "ok" for row in results["rows"]):
        raise RunFailed(f"no layout ran; each one's reason is in {out_dir / 'scaling.md'}")
    return 0


def cli() -> None:
    """The command's entry (benchmarks/run_matrix.sh runs this module)."""
    run_main(lambda: main(sys.argv[1:]), prog="run_matrix")


if __name__ == "__main__":
    cli()

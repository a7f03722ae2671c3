"""Horovod on a Slurm allocation. scripts/slurm/horovod.sbatch runs this in
the batch step, and so do the jobs of scripts/slurm/submit.sh: one recipe for
both.

    scripts/python.sh -m horovod_train slurm-job run [-- TRAINER OPTIONS...]
    scripts/python.sh -m horovod_train slurm-job run -- python SCRIPT ARGS...

By default every rank is a task of the job, started by srun, and Horovod
starts over MPI through Slurm's PMIx: Slurm tracks, binds, accounts for and
ends the ranks itself, and no node needs ssh to another. A job of 2 nodes
with 2 tasks each (SLURM_JOB_NODELIST=a,b, SLURM_TASKS_PER_NODE=2(x2)) runs,
in turn:

    srun --ntasks 1 ... python TRAINER OPTIONS... --check-options
                                       the trainer's options, checked once
                                       (a script that answers it alone:
                                       launch/pipeline.py's mark)
    srun --ntasks-per-node 1 ... python -m horovod_train.core.interfaces probe
                                       the network every node reaches every
                                       other on (launch/network.py)
    srun --mpi=pmix --ntasks=4 ... python -m horovod_train.core.rank_script
            TRAINER OPTIONS...         the ranks, with that network handed
                                       to Open MPI (in CIDR form) and to each
                                       rank, which names its own interface on
                                       it to NCCL and Gloo (core/rank_script.py)

Any script runs so: the job's arguments are the trainer's options, or a
command, `-- python my_train.py ARGS` (python is the runtime's; also
`python -u` and `python -m MODULE`), run as it is.

HVT_LAUNCHER=horovodrun runs `horovodrun -np 4 -H a:2,b:2 --gloo` from the
first node instead, its ranks on the other nodes started over ssh: for
elastic runs (--elastic), which Horovod's own driver starts and restarts.
The same probe chooses (or checks) the network, handed to horovodrun as
its --network-interfaces: names where every node has them, else networks
in CIDR form, so HVT_NETWORK_INTERFACE takes every form with either
launcher.

Settings, from the environment (`sbatch --export`, or exported before sbatch):

    HVT_LAUNCHER      srun (default): the ranks are Slurm tasks;
                      horovodrun: horovodrun over ssh from the first node
    HVT_NETWORK_INTERFACE
                      the network(s) the ranks use: interface names (eth0,
                      or ib0,eth0), each node's own (a:eth0,b:ens5), or a
                      network in CIDR form (10.0.0.0/24), checked on every
                      node first; default: the fastest that joins every
                      node, chosen by the probe
    HVT_NUM_PROC      ranks to start (default: every task of the job)
    HVT_RUNTIME   venv (default): the checkout's .venv (set up once, on a
                      filesystem every node mounts at the same path);
                      apptainer: `apptainer exec` of HVT_IMAGE (a .sif file
                      or docker://...); pyxis: `srun --container-image` of
                      HVT_IMAGE (an enroot URI or a .sqsh file)
    HVT_IMAGE     the image, for apptainer and pyxis
    HVT_MOUNTS    apptainer and pyxis: more binds, SRC:DST[:ro],... (data, outputs)
    HVT_TRAINER   the script the job's options go to (default
                      horovod_train/pytorch_mnist.py); or give a command
    HVT_TRAIN_DIR the checkout (default: the job's working directory); venv:
                      its .venv runs; apptainer and pyxis: mounted at /workspace,
                      the image's working directory (the image holds no code)
    HVT_PREFLIGHT=1 check the nodes, every pair of them and an allreduce
                      over the ranks before they start (scripts/preflight.sh;
                      venv only); a culprit ends the job, exit 1
    HVT_RESUME=1          add --resume: continue from the trainer's checkpoint. A
                      job that Slurm requeued (SLURM_RESTART_COUNT > 0) resumes
                      without it.
    HVT_DRY_RUN=1 print the commands instead of running them
  HVT_LAUNCHER=horovodrun only:
    HVT_KEYS      apptainer and pyxis: the cluster's key directory
                      (scripts/cluster_keys.sh), mounted read-only at
                      /etc/horovod/keys, where the image's sshd takes its keys
    HVT_SSH_PORT  the port horovodrun's ssh uses (the image's sshd: 12345,
                      the default with containers; venv: ssh_config's, unless set)

With horovodrun and a container runtime every node runs the image's
entrypoint, which starts its sshd on HVT_SSH_PORT with the cluster's
key: on the other nodes as a job step that lasts the job, on the first node
around horovodrun, whose ssh then lands in the other nodes' containers.

Standard library only: sites that run the image may have no venv on the
nodes, only a python3.
"""


import argparse
import os
import shlex
import signal
import subprocess
import sys
import time

from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.gpu import rules as gpu_rules
from horovod_train.launch import network, pipeline, starters
from horovod_train.launch.allocation import Allocation, allocation_from_env
from horovod_train.launch.hosts import SshTarget, probe_ssh_port
from horovod_train.launch.job import Job
from horovod_train.launch.openmpi import layers_set
from horovod_train.launch.prepare import prepare
from horovod_train.launch.slurm.plan import (
    Plan,
    make_plan,
    parse_flag,
    rank_count,
    settings_from_env,
    with_allocation,
)

SSHD_WAIT_S = 600  # the other nodes' containers: pulling an image can take minutes
STOP_GRACE_S = 20  # horovodrun's (or srun's) time to stop its ranks before it is killed


# --- running --------------------------------------------------------------------

def ssh_answers(host: str, port: int) -> bool:
    """True when host:port greets like an SSH server (the launcher's probe)."""
    return probe_ssh_port(host, SshTarget(host, port, proxied=False)) is None


def wait_for_sshd(hosts: tuple[str, ...], port: int, step: subprocess.Popen,
                  timeout_s: float = SSHD_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = list(hosts)
    while waiting:
        if step.poll() is not None:
            raise RunFailed(f"the containers' sshd step ended (exit {step.returncode}) before "
                            f"{', '.join(waiting)} answered on port {port}; see its output above")
        waiting = [host for host in waiting if not ssh_answers(host, port)]
        if waiting and time.monotonic() > deadline:
            raise RunFailed(f"no sshd on {', '.join(waiting)} port {port} after "
                            f"{timeout_s:.0f} s")
        if waiting:
            time.sleep(1)


def stop(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_plan(plan: Plan, env: dict | None = None) -> int:
    """Run the ranks; their output goes to the job's log. Returns srun's or
    horovodrun's exit code. Whatever interrupts it (a signal turned into
    SystemExit, submitit's requeue) stops that launcher first, so that it
    stops the ranks on every node."""
    sshd = None
    try:
        if plan.sshd:
            sshd = subprocess.Popen(plan.sshd)
            wait_for_sshd(plan.ssh_hosts, plan.ssh_port, sshd)
        main = subprocess.Popen(plan.main, cwd=plan.cwd, env=env)
        try:
            return main.wait()
        finally:
            stop(main)
    finally:
        if sshd:
            stop(sshd)


def describe(allocation: Allocation, job: Job, plan: Plan,
             choice: network.Choice | None, kept: dict[str, str] | None = None,
             dry_run: bool = False) -> str:
    """The job's first lines: the ranks, how they start, the network (and
    the layers' variables the user set, `kept`), the commands (all of them
    for a dry run)."""
    how = ("each a Slurm task (srun --mpi=pmix)" if job.srun
           else "started by horovodrun over ssh")
    net = (choice.said if choice else "chosen by the probe when the job runs" if dry_run
           else "none to choose: one node")
    lines = [f"slurm: job {allocation.job_id}: {rank_count(allocation, job)} ranks on "
             f"{allocation.host_list}, {how}, runtime {job.slurm.runtime}"
             + (f", restart {allocation.restarts}" if allocation.restarts else "")
             + f"; network {net}"
             + "".join(f", {name}={value} as set" for name, value in (kept or {}).items())]
    if choice and choice.left_out:
        lines.append("slurm: network: " + "; ".join(choice.left_out))
    steps = [("check", plan.check), ("probe", plan.probe), ("sshd step", plan.sshd)]
    lines += [f"slurm: {name}: {shlex.join(argv)}" for name, argv in steps if argv and dry_run]
    lines.append(f"slurm: run{f' in {plan.cwd}' if plan.cwd else ''}: {shlex.join(plan.main)}")
    return "\n".join(lines)


def allocated_gpus(env: dict) -> tuple[int | None, str] | None:
    """The GPUs Slurm gave the job, and the variable that says so (the
    count where Slurm gives one); None where it gave none."""
    on_node = env.get("SLURM_GPUS_ON_NODE", "").strip()
    if on_node.isdigit():
        return (int(on_node), f"SLURM_GPUS_ON_NODE={on_node}") if int(on_node) else None
    if env.get("SLURM_JOB_GPUS", "").strip():
        ids = env["SLURM_JOB_GPUS"].strip()
        return len(ids.split(",")), f"SLURM_JOB_GPUS={ids}"
    for name in ("SLURM_GPUS_PER_TASK", "SLURM_GPUS_PER_NODE", "SLURM_GPUS"):
        value = env.get(name, "").strip()
        if value and value.rsplit(":", 1)[-1] not in ("0", ""):
            return None, f"{name}={value}"
    return None


def check_gpu_build(job: Job, env: dict, node: str) -> None:
    """A venv whose Horovod was built for the CPU alone (set up on a login
    node without GPUs) in a job given GPUs: one line before anything
    starts, not a crash at the first GPU tensor. Images carry their own."""
    gpus = allocated_gpus(env)
    if job.slurm.in_container or job.cpu_only or gpus is None:
        return
    # No record (not built by setup.sh): the ranks' own checks apply.
    if gpu_rules.build_record(job.checkout / ".venv").get("gpu_ops") == "none":
        raise UserError(gpu_rules.cpu_only_problem(node, *gpus))


def check_launcher_options(config: dict, job: Job) -> None:
    """The trainer's options that the launcher cannot serve."""
    if job.srun and config.get("elastic"):
        raise UserError("--elastic needs HVT_LAUNCHER=horovodrun: Horovod's elastic driver "
                        "starts and replaces the ranks itself")
    if job.starter == "horovodrun" and config.get("use_adasum"):
        raise UserError("--use-adasum needs MPI, and HVT_LAUNCHER=horovodrun runs Gloo: leave "
                        "HVT_LAUNCHER unset, and srun starts the ranks over MPI")


def run_job(job_args: list[str], env: dict | None = None, settings: Job | None = None,
            dry_run: bool = False) -> int:
    """The whole job from inside the allocation, as launch/pipeline.py
    orders it: read it (`settings`, else from the environment), plan,
    check, preflight when asked, choose the network, print, run."""
    env = dict(os.environ if env is None else env)
    allocation = allocation_from_env(env)
    settings = settings or settings_from_env(env)
    plan = make_plan(allocation, settings, job_args)
    if dry_run:
        print(describe(allocation, settings, plan, None, dry_run=True), flush=True)
        return 0
    job = with_allocation(settings, allocation, "--no-cuda" in job_args)
    check_gpu_build(job, env, allocation.nodes[0])
    if job.srun:
        starters.check_pmix()
    if plan.check:
        check_launcher_options(pipeline.check_trainer(plan.check, plan.cwd), job)
    # horovodrun hands its own choice to every layer; srun's ranks keep the
    # user's. horovodrun's ssh to the nodes is checked as launch.sh checks it;
    # a container's sshd when its step has started it.
    kept = layers_set(env) if job.srun else {}
    choice = prepare(job, env, preflight_asked=job.slurm.preflight, check_hosts=not plan.sshd,
                     layers=kept)
    print(describe(allocation, job, plan, choice, kept), flush=True)
    if job.srun:
        env.update(pipeline.rank_environment(job.starter, choice, env))
    else:
        plan = make_plan(allocation, settings, job_args, choice)
    started = time.monotonic()
    code = run_plan(plan, env)
    print(f"slurm: job {allocation.job_id}: {job.starter} exited {code} after "
          f"{time.monotonic() - started:.1f} s", flush=True)
    return code


def main() -> int:
    parser = ArgumentParser(prog="slurm", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run"])
    parser.add_argument("job_args", nargs=argparse.REMAINDER,
                        help="-- and the trainer's options, or -- python SCRIPT ARGS")
    args = parser.parse_args()
    job_args = args.job_args[1:] if args.job_args[:1] == ["--"] else args.job_args
    # scancel's SIGTERM: stop horovodrun (and through it every rank) on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    signal.signal(signal.SIGUSR2, requeue_on_usr2)
    try:
        return run_job(job_args,
                       dry_run=parse_flag("HVT_DRY_RUN", os.environ.get("HVT_DRY_RUN")))
    except Requeue:
        return requeue(os.environ.get("SLURM_JOB_ID", ""))


class Requeue(SystemExit):
    """USR2 arrived: the ranks are stopped on the way out (run_plan's
    finally), then the job goes back to the queue."""


def requeue_on_usr2(*_) -> None:
    raise Requeue(128 + signal.SIGUSR2)


def requeue(job_id: str) -> int:
    """A time limit's warning (horovod.sbatch's --signal=B:USR2@120) or
    `scancel --batch --signal=USR2`: back to the queue, where the job starts
    again and resumes from the trainer's last checkpoint (a restarted job
    adds --resume), as submit.sh's jobs do."""
    result = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True,
                            timeout=60)
    if result.returncode != 0:
        raise RunFailed(f"USR2: scontrol requeue {job_id} failed: "
                        f"{(result.stderr.strip().splitlines() or ['no message'])[-1]}")
    print(f"slurm: job {job_id}: USR2: requeued; it resumes from the last checkpoint when it "
          "starts again", flush=True)
    return 0


def cli() -> None:
    """The command's entry (python -m, through scripts/python.sh)."""
    run_main(main, prog="slurm")


if __name__ == "__main__":
    cli()

"""Submit Horovod training to Slurm from Python, with Submitit: the same job
as scripts/slurm/horovod.sbatch (horovod_train/launch/slurm/sbatch.py checks the
trainer's options, chooses the network and starts a rank in every task of the
job with srun), plus requeue-and-resume.

    scripts/slurm/submit.sh --nodes 2 --tasks-per-node 2 --time 60 -- \\
        --epochs 3 --data-dir data --no-progress

Options before `--` shape the job; what follows `--` goes to the trainer,
or is the command every rank runs, as horovod.sbatch takes it:

    scripts/slurm/submit.sh --nodes 2 --tasks-per-node 2 -- python my_train.py ARGS
It prints the job id and its log, then waits for the job and prints how it
ended (--no-wait: returns after submitting).

Preemption and time limits: Slurm sends the job's Python a signal
--signal-delay seconds before the time limit (and `scancel --batch
--signal=USR2 JOB` sends the same); Submitit then calls the job's
checkpoint(), which resubmits it with --resume, and requeues it, so the
trainer continues from its last checkpoint (at most --max-requeues times
after time limits; preemptions always). A job that Slurm itself requeued
(preemption with PreemptMode=REQUEUE, a node failure) also resumes.

Submitit keeps its files (the pickled job, the logs) in --folder, which must
be on a filesystem that every node sees, as the checkout must be.
"""

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

try:
    import submitit
except ImportError:  # said in one line by main()
    submitit = None

from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.launch import pipeline
from horovod_train.launch.job import Job
from horovod_train.launch.slurm import plan, sbatch

REPO = Path(__file__).resolve().parents[3]  # the checkout

# Slurm states after which the job will not run again (requeued jobs pass
# through PENDING and REQUEUED instead).
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
POLL_S = 2.0


class HorovodJob:
    """What the Slurm job runs (Submitit pickles it): launch/slurm/sbatch.py's job,
    in the batch step on the first node, as horovod.sbatch does."""

    def __init__(self, settings: Job):
        self.settings = settings  # the job's, checked before it was submitted

    def __call__(self, job_args: list[str]) -> dict:
        started = time.monotonic()
        code = sbatch.run_job(job_args, settings=self.settings)
        if code != 0:
            raise RunFailed(f"{self.settings.starter} exited {code}")
        return {"exit_code": code, "wall_time_s": round(time.monotonic() - started, 1)}

    def checkpoint(self, job_args: list[str]):
        """Submitit calls this on the pre-timeout or preemption signal: the
        requeued job is this one again, resuming from the trainer's
        checkpoint (a script that does not answer --check-options is run
        again as it was, and resumes by itself)."""
        program = plan.job_program(job_args, self.settings)
        resume = program.checked and "--resume" not in job_args
        return submitit.helpers.DelayedSubmission(self, [*job_args, *(["--resume"] if resume
                                                                      else [])])


def make_executor(args: argparse.Namespace):
    # `exec`: the batch shell becomes Submitit's Python, so that the
    # pre-timeout signal sent to the batch shell (B: below) reaches it.
    executor = submitit.SlurmExecutor(folder=Path(args.folder).resolve(),
                                      max_num_timeout=args.max_requeues,
                                      python=f"exec {shlex.quote(sys.executable)}")
    allocation = {"nodes": args.nodes, "ntasks_per_node": args.tasks_per_node}
    for option in ("gpus_per_node", "gpus_per_task", "cpus_per_task"):
        if getattr(args, option):
            allocation[option] = getattr(args, option)
    executor.update_parameters(
        job_name=args.job_name, time=args.time, partition=args.partition,
        signal_delay_s=args.signal_delay, stderr_to_stdout=True,
        # One process in the batch step, launch/slurm/sbatch.py, which starts the
        # ranks itself (srun, or horovodrun). The batch shell gets the
        # signal (B:), so that Submitit's Python does.
        use_srun=False,
        # The allocation's shape goes to sbatch as is. Given to Submitit as
        # nodes and tasks, it would count nodes x tasks Python processes and
        # wait for a result from each.
        additional_parameters={**allocation, "signal": f"B:USR2@{args.signal_delay}",
                               "requeue": True})
    return executor


def job_state(job_id: str) -> str | None:
    """Slurm's state of the job (scontrol, which needs no accounting), or
    None once Slurm has forgotten it."""
    result = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                            text=True, timeout=60)
    for field in result.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return None


def wait(job, log: Path) -> int:
    """Until the job has its result, or Slurm says it ended without one."""
    started = time.monotonic()
    ended_at = None
    while not job.paths.result_pickle.exists():
        state = job_state(job.job_id)
        if state in FINAL_STATES or state is None:
            # The result is written just before the job ends: give it a moment.
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at > 10:
                raise RunFailed(f"job {job.job_id} ended {state or '(forgotten by Slurm)'} "
                                f"without a result; log: {log}")
        time.sleep(POLL_S)
    elapsed = time.monotonic() - started
    try:
        result = job.result()
    except Exception as err:  # the job's own exception, re-raised by Submitit
        last = str(err).strip().splitlines()[-1:] or [type(err).__name__]
        raise RunFailed(f"job {job.job_id} failed after {elapsed:.0f} s: {last[0]}; "
                        f"log: {log}") from None
    # The result is written just before the job's process exits: the state
    # shown is Slurm's once it agrees (a few seconds), not RUNNING.
    state, deadline = job_state(job.job_id), time.monotonic() + 30
    while state is not None and state not in FINAL_STATES and time.monotonic() < deadline:
        time.sleep(POLL_S / 4)
        state = job_state(job.job_id)
    print(f"submit: job {job.job_id} {state or 'finished'} after {elapsed:.0f} s: {result}")
    return 0


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text} must be an integer >= 1")
    return int(text)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = ArgumentParser(prog="submit.sh", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    job = parser.add_argument_group("the job")
    job.add_argument("--nodes", type=positive, default=2)
    job.add_argument("--tasks-per-node", type=positive, default=2,
                     help="Horovod ranks per node (on GPU nodes: one per GPU)")
    gpus = job.add_mutually_exclusive_group()
    gpus.add_argument("--gpus-per-node", type=positive, default=None,
                      help="GPUs per node (sbatch --gpus-per-node): every rank of a node sees "
                           "them all and takes its local rank's")
    gpus.add_argument("--gpus-per-task", type=positive, default=None,
                      help="GPUs per rank (sbatch --gpus-per-task, 1): each rank sees its own "
                           "and takes it")
    job.add_argument("--cpus-per-task", type=positive, default=None,
                     help="cores per rank, for its threads and data loaders (sbatch "
                          "--cpus-per-task; the ranks' srun gets it too)")
    job.add_argument("--partition", default=None, help="default: the cluster's default")
    job.add_argument("--time", type=positive, default=60, help="time limit, minutes")
    job.add_argument("--job-name", default="horovod")
    job.add_argument("--folder", default="logs/submitit",
                     help="Submitit's files and the job's log, on a filesystem every "
                          "node sees (default %(default)s)")
    run = parser.add_argument_group("what it runs (as horovod.sbatch's variables)")
    run.add_argument("--launcher", choices=plan.LAUNCHERS, default="srun",
                     help="srun: every rank a Slurm task (PMIx, no ssh); horovodrun: over "
                          "ssh from the first node, for elastic runs (default %(default)s)")
    run.add_argument("--network-interface", default=None, metavar="NETWORK",
                     help="the ranks' network, as HVT_NETWORK_INTERFACE takes it: interface "
                          "name(s), HOST:NAME per host, or a network in CIDR form, with "
                          "either launcher; checked by connecting from every node "
                          "(default: chosen by probing the nodes)")
    run.add_argument("--num-proc", default=None, help="ranks (default: every task of the job)")
    run.add_argument("--runtime", choices=plan.RUNTIMES, default="venv")
    run.add_argument("--image", default=None, help="apptainer or pyxis image")
    run.add_argument("--mounts", default=None, help="apptainer, pyxis: SRC:DST[:ro],...")
    run.add_argument("--keys", default=None,
                     help="--launcher horovodrun with apptainer, pyxis: the cluster's key "
                          "directory")
    run.add_argument("--ssh-port", default=None,
                     help="--launcher horovodrun: the nodes' SSH port")
    run.add_argument("--trainer", default=None,
                     help="the script the options after -- go to (HVT_TRAINER; default "
                          f"{plan.DEFAULT_TRAINER}); or give a command after --")
    run.add_argument("--resume", action="store_true",
                     help="start from the trainer's last checkpoint")
    run.add_argument("--preflight", action="store_true",
                     help="check the nodes, every pair and an allreduce over the ranks before "
                          "they start (HVT_PREFLIGHT=1)")
    run.add_argument("--checkout", default=str(REPO), help="the checkout the nodes run")
    requeue = parser.add_argument_group("requeue")
    requeue.add_argument("--max-requeues", type=int, default=3,
                         help="requeues after time limits (preemptions do not count)")
    requeue.add_argument("--signal-delay", type=positive, default=120,
                         help="seconds before the time limit that the job is signalled "
                              "to requeue")
    parser.add_argument("--no-wait", action="store_true", help="return after submitting")
    if "--" in argv:
        split = argv.index("--")
        return parser.parse_args(argv[:split]), argv[split + 1:]
    return parser.parse_args(argv), []


def main() -> int:
    args, trainer_args = parse_args(sys.argv[1:])
    # Checked here, before anything is submitted.
    settings = plan.make_settings(launcher=args.launcher, runtime=args.runtime,
                                   image=args.image, keys=args.keys, mounts=args.mounts,
                                   ssh_port=args.ssh_port, trainer=args.trainer,
                                   resume=args.resume, checkout=args.checkout,
                                   interfaces=args.network_interface, num_proc=args.num_proc,
                                   preflight=args.preflight)
    # A command that cannot run, or --resume for a script that does not take it: one line.
    program = plan.with_resume(plan.job_program(trainer_args, settings), settings, 0)
    # The trainer's options too, here, where the job would find a mistake only
    # after its wait in the queue (the checkout's venv; an image's Python is
    # the nodes').
    if program.checked and not settings.slurm.in_container:
        sbatch.check_launcher_options(pipeline.check_trainer(
            [plan.runtime_python(settings), *program.words("--check-options")],
            settings.checkout), settings)
    if submitit is None:
        raise UserError("submitit is not installed: pip install submitit "
                        "(scripts/setup.sh installs it)")
    try:
        job = make_executor(args).submit(HorovodJob(settings), trainer_args)
    except submitit.core.utils.FailedJobError as err:  # sbatch refused, with its output
        raise UserError(f"sbatch failed: {str(err).strip().splitlines()[-1]}") from None
    log = job.paths.stdout
    print(f"submit: job {job.job_id} submitted ({args.nodes} nodes x {args.tasks_per_node} "
          f"tasks); log: {log}", flush=True)
    if args.no_wait:
        return 0
    return wait(job, log)


def cli() -> None:
    run_main(main, prog="submit")


if __name__ == "__main__":
    cli()

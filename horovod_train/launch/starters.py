"""The programs that start ranks, as backends under one Job: horovodrun
(beside this Python, else on PATH; also the preflight's allreduce), srun
with Slurm's PMIx plugin, and Horovod's Python API (horovod.run, a trainer's
--num-proc). Each is found and checked before a job relies on it, and a
Job's arguments for each are made here alone; the ranks' environment for
each is pipeline.rank_environment's, by the starter's name.

Standard library only: the Slurm job imports it under a bare python3."""

import shutil
import subprocess
import sys
from pathlib import Path

from horovod_train.core.errors import UserError
from horovod_train.launch import hosts, network
from horovod_train.launch.job import Job


def horovodrun_path() -> str:
    """The horovodrun installed beside this Python, else the one on PATH."""
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.exists() else shutil.which("horovodrun")
    if not found:
        raise UserError("horovodrun not found beside this Python or on PATH "
                        "(scripts/setup.sh installs it)")
    return found


def horovodrun_options(job: Job, choice: network.Choice | None = None) -> list[str]:
    """horovodrun's options for the job: its ranks and hosts, how ssh
    reaches them, the chosen network (horovodrun then probes none itself)
    and the controller. The Slurm job's horovodrun and the preflight's
    allreduce take them from here; launch.sh passes the user's own."""
    return ["-np", str(job.num_proc), "-H", hosts.host_list(job.hosts),
            *(["-p", str(job.ssh_port)] if job.ssh_port else []),
            *(["--ssh-identity-file", job.identity] if job.identity else []),
            *(["--network-interfaces", choice.horovodrun_nics] if choice else []),
            *([f"--{job.controller}"] if job.controller else [])]


def srun_options(job: Job, cpus_per_task: int | None = None) -> list[str]:
    """srun's options for the job's ranks, a Slurm task each: Open MPI
    started through PMIx, the whole step ended when one rank fails, the
    job's CPUs per task where the allocation gives them."""
    return ["--mpi=pmix", "--kill-on-bad-exit=1", f"--ntasks={job.num_proc}",
            *([f"--cpus-per-task={cpus_per_task}"] if cpus_per_task else [])]


def horovod_run_arguments(job: Job, choice: network.Choice | None = None) -> dict:
    """horovod.run's keyword arguments for the job (Horovod's Python API,
    horovodrun's machinery in this process): its ranks and hosts, the
    controller, the chosen network."""
    return {"np": job.num_proc, "hosts": hosts.host_list(job.hosts),
            "use_gloo": job.controller == "gloo", "use_mpi": job.controller == "mpi",
            "network_interfaces": choice.horovodrun_nics.split(",") if choice else None}


def mpi_plugins(listing: str) -> list[str]:
    """The plugin names `srun --mpi=list` prints, one an indented line."""
    return [line.strip() for line in listing.splitlines()
            if line[:1] in ("\t", " ") and line.strip()]


def check_pmix() -> None:
    """srun can start the ranks' Open MPI: Slurm has its PMIx plugin. (Open
    MPI 4.1 as Debian builds it has no PMI-1 or PMI-2 client, so pmi2 would
    not do.)"""
    try:
        result = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True,
                                timeout=60)
    except FileNotFoundError:
        raise UserError("srun not found: the job's nodes need Slurm's client commands") from None
    plugins = mpi_plugins(result.stdout + result.stderr)
    if "pmix" not in plugins:
        raise UserError(f"srun offers no PMIx plugin (srun --mpi=list: "
                        f"{', '.join(plugins) or 'nothing'}): the ranks' Open MPI starts "
                        "through PMIx; ask the site for Slurm's mpi/pmix, or set "
                        "HVT_LAUNCHER=horovodrun")

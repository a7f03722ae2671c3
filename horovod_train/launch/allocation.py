"""A Slurm job's allocation: its nodes (SLURM_JOB_NODELIST, expanded by
Slurm where it is compressed) with its tasks per node as Horovod slots, and
the one way a command runs once on each of its nodes (a job step of one
task per node, outside any container: the network probe, the preflight's
facts).

Standard library only: the batch step may have only a python3."""

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from horovod_train.core.errors import UserError
from horovod_train.core.slurm_tasks import expand_tasks_per_node
from horovod_train.launch.hosts import Host, host_list, total_slots


def node_hostnames(nodelist: str) -> list[str]:
    """The nodes of SLURM_JOB_NODELIST. A plain list is split here; a
    compressed one ('node[01-04],gpu7') is expanded by Slurm itself,
    `scontrol show hostnames`."""
    if "[" not in nodelist:
        return [name.strip() for name in nodelist.split(",") if name.strip()]
    try:
        result = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                                capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UserError(f"scontrol not found: it expands SLURM_JOB_NODELIST={nodelist}") from None
    names = result.stdout.split()
    if result.returncode != 0 or not names:
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise UserError(f"scontrol show hostnames {nodelist}: {detail}")
    return names


@dataclass(frozen=True)
class Allocation:
    job_id: str
    hosts: tuple[Host, ...]  # each node with its tasks as slots, in Slurm's order
    restarts: int  # times Slurm requeued and restarted this job
    cpus_per_task: int | None = None  # sbatch --cpus-per-task, which srun does not inherit

    @property
    def num_proc(self) -> int:
        return total_slots(self.hosts)

    @property
    def host_list(self) -> str:
        return host_list(self.hosts)

    @property
    def nodes(self) -> list[str]:
        return [host.name for host in self.hosts]


def allocation_from_env(env: dict, hostnames=node_hostnames) -> Allocation:
    """The job's nodes (SLURM_JOB_NODELIST) with its tasks per node
    (SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE) as Horovod slots."""
    job_id = env.get("SLURM_JOB_ID", "")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", "")
    if not job_id or not nodelist:
        raise UserError("not inside a Slurm job (SLURM_JOB_ID and SLURM_JOB_NODELIST are "
                        "unset): submit it, e.g. sbatch scripts/slurm/horovod.sbatch")
    names = hostnames(nodelist)
    if env.get("SLURM_TASKS_PER_NODE"):
        tasks = expand_tasks_per_node(env["SLURM_TASKS_PER_NODE"])
        origin = f"SLURM_TASKS_PER_NODE={env['SLURM_TASKS_PER_NODE']}"
    elif env.get("SLURM_NTASKS_PER_NODE"):
        tasks = expand_tasks_per_node(env["SLURM_NTASKS_PER_NODE"]) * len(names)
        origin = f"SLURM_NTASKS_PER_NODE={env['SLURM_NTASKS_PER_NODE']}"
    else:
        raise UserError("the job has no tasks per node (SLURM_TASKS_PER_NODE is unset): "
                        "submit with --ntasks-per-node, one task per Horovod rank")
    if len(tasks) != len(names):
        raise UserError(f"{origin} counts {len(tasks)} nodes, but "
                        f"SLURM_JOB_NODELIST={nodelist} has {len(names)}")
    restarts = env.get("SLURM_RESTART_COUNT", "0")
    cpus = env.get("SLURM_CPUS_PER_TASK", "")
    nodes = tuple(Host(name, count) for name, count in zip(names, tasks, strict=True))
    return Allocation(job_id, nodes, int(restarts) if restarts.isdigit() else 0,
                      int(cpus) if cpus.isdigit() else None)


def on_each_node(nodes: list[str], checkout: str | Path, args: list[str],
                 stdin: bool = False) -> list[str]:
    """`python ARGS` once on each node, as one job step, in the checkout,
    under the batch step's Python (the venv's, at the same path on every
    node, or python3); with `stdin`, what is written to srun's stdin
    reaches every task (the probe's plan)."""
    return ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            "--mpi=none", *(["--input=all"] if stdin else []), f"--chdir={checkout}",
            sys.executable, *args]

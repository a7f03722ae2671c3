"""Slurm's task counts as its variables write them (SLURM_TASKS_PER_NODE,
SLURM_STEP_TASKS_PER_NODE): a rank reads them before Horovod starts
(runtime.py), the Slurm job to lay out its hosts (launch/slurm/sbatch.py)."""

import re

from horovod_train.core.errors import UserError

TASKS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE's compressed form, one count per node:
    '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for item in text.split(","):
        match = TASKS_ITEM.match(item.strip())
        if not match or int(match[1]) < 1 or (match[2] and int(match[2]) < 1):
            raise UserError(f"SLURM_TASKS_PER_NODE={text}: cannot read {item.strip()!r} "
                            "(want counts such as 2(x2),1)")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts

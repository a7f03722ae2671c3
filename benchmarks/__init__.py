"""The lab: the code that measures the product, apart from it. Each module
with a `cli()` is a command, run by path (`python benchmarks/NAME.py`, with
the project's environment: the checkout's .venv, or the image, where the
checkout is on PYTHONPATH) or as `python -m benchmarks.NAME`;
run_matrix.sh starts matrix.py. It imports horovod_train; horovod_train
never imports it. The timed steps of the trainer's --benchmark-steps mode
are the product's (horovod_train/torch/timed_steps.py), shared with the DDP
baseline here."""

import os
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent  # benchmarks/ sits at the checkout's root


def venv_env() -> dict:
    """This environment's, with this Python's directory first on PATH: the
    ranks horovodrun starts find the same python and tools there."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


def as_typed(command: list[str], names: dict[Path, str]) -> list[str]:
    """A command as a user types it, for the records: python and horovodrun
    by name, the checkout's files relative to it, and a name for each of a
    run's own directories (`names`), so that no machine's paths travel."""
    programs = {sys.executable: "python", str(Path(sys.executable).parent / "horovodrun"):
                "horovodrun"}
    typed = []
    for part in command:
        if part in programs:
            typed.append(programs[part])
            continue
        for path, name in names.items():
            part = part.replace(str(path), name)
        if part.startswith(f"{CHECKOUT}/"):
            part = part[len(f"{CHECKOUT}/"):]
        typed.append(part)
    return typed

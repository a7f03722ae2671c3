"""A rank that srun starts, running any script:

    python -m horovod_train.core.rank_script SCRIPT [ARGS...]
    python -m horovod_train.core.rank_script -m MODULE [ARGS...]

The Slurm job (launch/slurm/plan.py) starts every srun rank so. It prepares
the rank as the project's trainers prepare theirs (runtime.prepare_rank:
the project's Open MPI setting, this host's interfaces on the job's chosen
networks for Gloo and NCCL, MPI started at the start barrier where the job
set one), then runs the script as `python SCRIPT ARGS` would: as
`__main__`, with its sys.argv and its folder first on sys.path, ending with
its own exit code and traceback. Without it, a user's script under srun in
a port range would meet the crash the start barrier exists for
(core/start_barrier.py).

horovodrun's ranks need none of it: horovodrun hands its network to every
layer itself."""

import runpy
import sys
from pathlib import Path

from horovod_train.core import runtime
from horovod_train.core.errors import UserError, exit_code

PROG = "rank_script"


def target_of(argv: list[str]) -> tuple[str, bool, list[str]]:
    """(the script's path or the module's name, whether it is a module, its
    arguments); a missing script is bad input."""
    module = argv[:1] == ["-m"]
    words = argv[1:] if module else argv
    if not words:
        raise UserError("usage: python -m horovod_train.core.rank_script "
                        "SCRIPT [ARGS...] | -m MODULE [ARGS...]")
    target, args = words[0], words[1:]
    if not module and not Path(target).is_file():
        raise UserError(f"{target}: no such script (from {Path.cwd()})")
    return target, module, args


def main(argv: list[str]) -> None:
    prepared: list[tuple[str, bool, list[str]]] = []

    def prepare() -> None:
        prepared.append(target_of(argv))
        runtime.prepare_rank()

    code = exit_code(prepare, PROG)
    if code:
        sys.exit(code)
    target, module, args = prepared[0]
    if module:
        sys.argv = [target, *args]  # runpy sets argv[0] to the module's file
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *args]
        sys.path[0] = str(Path(target).resolve().parent)  # as `python SCRIPT` puts it
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

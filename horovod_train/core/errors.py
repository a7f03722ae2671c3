"""The project's one error convention, for every entry point in
horovod_train/, scripts/ and benchmarks/ (run_main):

  - UserError: bad input, found before or while the work starts: a wrong
    option, a missing or corrupt file, an unusable directory, a mismatched
    checkpoint, an unreachable host the user named, a missing tool. One line
    `prog: error: ...` on stderr, exit 2.
  - RunFailed: the input was fine, but something started and failed: a
    build, a subprocess, a job, a cluster that did not come up, a training
    that diverged. One line `prog: error: ...`, exit 1; none when the line
    was said already (`said`: by rank 0, for every rank of a job).
  - Ctrl-C: `prog: interrupted`, exit 130.

Standard library only (console.py is too): scripts run under a bare
python3 import it."""

import argparse
import atexit
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from horovod_train.core.console import say  # one write per line, as the trainers print


class UserError(Exception):
    """Bad input or environment, for the user to fix: exit 2."""


class RunFailed(Exception):
    """Something started and failed, the input being fine: exit 1. With
    said=True its line was said already (rank 0 says a job's line once, then
    every rank ends so): exit 1 without a second one."""

    def __init__(self, *args, said: bool = False):
        super().__init__(*args)
        self.said = said


# The `prog` of the exit_code() running now (innermost last), for a line said
# before the error reaches it (program()).
_RUNNING: list[str] = []


def read_json(path: Path) -> object:
    """A JSON file read as input: missing, unreadable or not JSON is bad
    input, in one line naming the file."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read: {err}") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with the convention's one line for bad options:
    argparse would print its usage first, which --help shows anyway. A
    program behind a script (prog `submit.sh`) names itself as its other
    errors do (`submit:`), so one program has one name."""

    def error(self, message: str):
        print_error(self.prog.removesuffix(".sh"), message)
        sys.exit(2)


def print_error(prog: str, error: Exception | str) -> None:
    """The one error line, for the rare caller that must say it before
    ending otherwise (a rank about to abort its peers)."""
    say(f"{prog}: error: {error}", sys.stderr)


def program() -> str:
    """The name this process's error line starts with: the `prog` that
    exit_code runs main under (a trainer's, also in a rank horovod.run
    started), else the script's name."""
    return _RUNNING[-1] if _RUNNING else Path(sys.argv[0]).name


def run_main(main: Callable[[], int | None], prog: str | None = None,
             exit_at_once: bool = False) -> None:
    """Run an entry point and exit with its code, or as the convention says
    for a UserError (2), a RunFailed (1) or Ctrl-C (130). The line starts
    with `prog`, by default the name of the script run.

    With exit_at_once (the trainers), the process ends as soon as its exit
    handlers have run (Horovod's shutdown among them), without the
    interpreter's teardown of its modules, which takes half a second or
    more once torch is loaded; the outputs are all written, closed and
    synced by then."""
    prog = prog or Path(sys.argv[0]).name
    code = exit_code(main, prog)
    if exit_at_once:
        exit_now(code)
    sys.exit(code)


def exit_code(main: Callable[[], int | None], prog: str) -> int:
    """Run `main` and return the code the convention gives its end, having
    said the error's one line (run_main exits with it; a rank that
    horovod.run started returns it)."""
    _RUNNING.append(prog)
    try:
        return main() or 0
    except UserError as err:
        print_error(prog, err)
        return 2
    except RunFailed as err:
        if not err.said:
            print_error(prog, err)
        return 1
    except KeyboardInterrupt:
        say(f"{prog}: interrupted", sys.stderr)
        return 130
    finally:
        _RUNNING.pop()


def exit_now(code: int) -> None:
    """End the process as a normal exit would, less the teardown of its
    modules: wait for its other threads, run the exit handlers, flush."""
    sys.stdout.flush()
    sys.stderr.flush()
    # What Python's own exit does first, in its order (private names, in
    # every Python 3).
    threading._shutdown()
    # A run that failed has said why in its one line; an exit handler that
    # then fails because of it (MXNet's, once Horovod has shut down) would
    # add a traceback that says nothing more (atexit reports it through
    # sys.unraisablehook).
    hook = sys.unraisablehook
    if code:
        sys.unraisablehook = lambda unraisable: None
    try:
        atexit._run_exitfuncs()
    finally:
        sys.unraisablehook = hook
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

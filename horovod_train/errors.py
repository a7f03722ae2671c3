"""One-line errors for the user, instead of tracebacks."""

import sys
from collections.abc import Callable
from pathlib import Path


class UserError(Exception):
    """A problem with the user's input or environment: bad option, missing or
    corrupt data, unusable directory, mismatched checkpoint."""


def run_main(main: Callable[[], int | None], prog: str | None = None) -> None:
    """Run an entry point; a UserError becomes one line on stderr and exit 2.
    The line starts with `prog`, by default the name of the script run."""
    prog = prog or Path(sys.argv[0]).name
    try:
        code = main()
    except UserError as err:
        print(f"{prog}: error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        sys.exit(130)
    sys.exit(code or 0)

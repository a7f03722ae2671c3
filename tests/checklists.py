"""The checklist pages (docs/gpu-servers.md, docs/slurm-cluster.md,
docs/your-script.md) read as a user copies them: their shell blocks, each with the mark before it
that says how the tests run it, and the commands in each block.

    <!-- run: emulated -->      run as written on the emulated hosts a and b
    <!-- run: slurm -->         submitted as written to the local Slurm
    <!-- run: help -->          each option checked against the program's --help
    <!-- not run here: WHY -->  options of the project's programs checked only

Runs here differ from the page in what only GPUs need (four ranks a host,
one GPU a task), in the test's own data and output directories, and in
the user's scripts, which are tests/user_scripts/'s: HERE's and USER_SCRIPTS'
replacements, which the run tests apply."""

import re
import shlex
from dataclasses import dataclass

from conftest import REPO

PAGES = [REPO / "docs" / "gpu-servers.md", REPO / "docs" / "slurm-cluster.md",
         REPO / "docs" / "your-script.md"]
MARK = re.compile(r"<!-- (run: (emulated|slurm|help)|not run here: .+) -->")
BLOCK = re.compile(r"(?P<mark><!-- [^\n]* -->\n)?```bash\n(?P<body>.*?)```", re.S)
# The GPU layout of the pages, as the emulated hosts' two cores carry it.
HERE = {"-H a:4,b:4": "-H a:2,b:2", "-np 8": "-np 4", "--tasks-per-node 4": "--tasks-per-node 2",
        "--gpus-per-task 1 ": ""}
# The scripts docs/your-script.md names, as scripts of their shape in the tests.
USER_SCRIPTS = {"my_train.py": "tests/user_scripts/pytorch_mnist.py",
                "my_keras_train.py": "tests/user_scripts/tensorflow2_keras_mnist.py"}


@dataclass
class Block:
    page: str
    line: int  # of its first command, 1-based
    mark: str | None  # "emulated", "slurm", "help", "not run here", or None
    commands: list[list[str]]  # each command's words, the shell's way


def commands_of(body: str) -> list[list[str]]:
    """The block's commands: continuation lines joined, comments dropped,
    `A && B` split in two."""
    text = body.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        current = []
        for word in words:
            if word == "&&":
                commands.append(current)
                current = []
            else:
                current.append(word)
        if current:
            commands.append(current)
    return commands


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            mark = MARK.fullmatch(match["mark"].strip()) if match["mark"] else None
            kind = None if mark is None else (mark[2] or "not run here")
            line = text.count("\n", 0, match.start("body")) + 1
            found.append(Block(page.name, line, kind, commands_of(match["body"])))
    return found


def as_run_here(command: list[str], extra: dict[str, str]) -> str:
    """A page's command as the tests run it: HERE's replacements, then the
    test's own (`extra`: its data, its directories)."""
    line = shlex.join(command)
    for old, new in {**HERE, **USER_SCRIPTS, **extra}.items():
        line = line.replace(old, new)
    return line

"""The checklist pages (tests/checklists.py) hold what a user copies: every
shell block says how the tests run it; every command of the project names
a program that exists and options its --help lists (the trainer's after
`--`, horovodrun's and the trainer's in a horovodrun command, Slurm's own
where Slurm is installed); the README's quick start links both. Their
HVT_ variables, links and anchors are test_docs_commands.py's, as every
page's are."""

import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from checklists import blocks
from conftest import BIN, REPO

from horovod_train.launch.pipeline import is_python

TRAINER = "horovod_train/pytorch_mnist.py"
SLURM = ("sbatch", "srun", "salloc")


@functools.cache
def slurm_conf() -> str:
    """A slurm.conf for Slurm's commands' --help, which read one and ask no
    daemon."""
    path = Path(tempfile.mkdtemp(prefix="checklist-slurm-")) / "slurm.conf"
    path.write_text("ClusterName=help\nSlurmctldHost=ctl(127.0.0.1)\n"
                    "NodeName=a NodeAddr=127.0.0.1 CPUs=1\nPartitionName=p Nodes=a\n")
    return str(path)


@functools.cache
def help_text(*program: str) -> str:
    env = {**os.environ, "SLURM_CONF": slurm_conf()} if program[0] in SLURM else None
    result = subprocess.run([*program, "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, (program, result.stderr[-2000:])
    return result.stdout


def options(words: list[str]) -> list[str]:
    """The options among a command's words, without their values."""
    return [word.split("=", 1)[0] for word in words
            if re.fullmatch(r"--?[a-zA-Z][\w-]*(=.*)?", word)]


def program_parts(command: list[str]) -> list[tuple[tuple[str, ...], list[str]]]:
    """(the program whose --help lists them, the words given it) for each
    part of a command that is the project's, horovodrun's or Slurm's."""
    head = command[0]
    # A user's script (docs/your-script.md) is its own: only what comes
    # before its python is checked.
    user = next((i for i, word in enumerate(command)
                 if is_python(word) and TRAINER not in command[i:]), None)
    if user is not None:
        return program_parts([w for w in command[:user] if w != "--"]) if user else []
    if head in SLURM:
        ours = next((i for i, w in enumerate(command) if w.startswith(("scripts/", "benchmarks/"))),
                    len(command))
        parts = [((head,), command[1:ours])] if shutil.which(head) else []
        if ours < len(command):
            script, rest = command[ours], command[ours + 1:]
            if script == "scripts/slurm/horovod.sbatch":  # what follows goes to the trainer
                return [*parts, ((str(BIN / "python"), TRAINER), rest)]
            return [*parts, *program_parts(command[ours:])]
        return parts
    if head == "horovodrun" and TRAINER in command:
        at = command.index(TRAINER)
        return [((str(BIN / "horovodrun"),), command[1:at - 1]),
                ((str(BIN / "python"), TRAINER), command[at + 1:])]
    if head == "horovodrun":  # what a user's script came after
        return [((str(BIN / "horovodrun"),), command[1:])]
    if head == "scripts/python.sh" and command[1:3] == ["-m", "horovod_train"]:
        words = [w for w in command[3:] if not w.startswith("-")][:2]  # the command, its verb
        return [(("scripts/python.sh", "-m", "horovod_train", *words), command[3 + len(words):])]
    if head.startswith(("scripts/", "benchmarks/")):
        assert (REPO / head).is_file(), f"{head}: no such program"
        if "--" in command:  # submit.sh: the trainer's options follow
            at = command.index("--")
            return [((head,), command[1:at]), ((str(BIN / "python"), TRAINER), command[at + 1:])]
        return [((head,), command[1:])]
    return []  # the system's own commands (git, ssh, nvidia-smi, ...)


BLOCKS = blocks()


def test_every_block_says_how_it_is_run_and_some_are_run():
    unmarked = [f"{b.page}:{b.line}" for b in BLOCKS if b.mark is None]
    assert not unmarked, f"shell blocks without a run mark: {unmarked}"
    marks = {(b.page, b.mark) for b in BLOCKS}
    assert {("gpu-servers.md", "emulated"), ("slurm-cluster.md", "slurm"),
            ("your-script.md", "emulated"), ("your-script.md", "slurm")} <= marks


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.page}:{b.line}")
def test_each_command_names_options_its_program_lists(block):
    for command in block.commands:
        for program, words in program_parts(command):
            text = help_text(*program)
            for option in options(words):
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), (
                    f"{block.page}:{block.line}: {Path(program[-1]).name} has no {option}")


def test_the_readme_quick_start_links_both_pages():
    quick_start = (REPO / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ")[0]
    assert "docs/gpu-servers.md" in quick_start and "docs/slurm-cluster.md" in quick_start

"""Every command README.md and docs/*.md give to copy is true: the program
it names exists and answers --help, each option it passes is one that
--help lists, each HVT_ variable it sets is one the code reads, and every
link and anchor of the pages resolves. tests/docs_commands.py reads the
pages; a block marked `<!-- illustrative -->` has its programs and options
left unchecked, not its HVT_ variables (a name is never a placeholder).

Each kind of failure is one test that lists them all, page:line first."""

import os
import re
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import unquote

from conftest import BIN, REPO
from docs_commands import (
    PAGES,
    Program,
    Use,
    Word,
    all_commands,
    anchors,
    hvt_variables_set,
    links,
    options_given,
    page_commands,
    page_name,
    uses_of,
)

HELP_TIMEOUT_S = 60
# The pages' `python`, `horovodrun`, `torchrun` are the venv's, as after
# `source .venv/bin/activate`; so is the python3 of a script's shebang.
VENV_PROGRAMS = {"python", "horovodrun", "torchrun"}
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
CODE_FOLDERS = ("horovod_train", "scripts", "docker", "benchmarks")


@dataclass
class Help:
    code: int | None  # None: timed out
    text: str  # stdout and stderr


HELPS: dict[tuple[str, ...], Help] = {}  # by Program.start, for the whole session


def run_help(start: tuple[str, ...]) -> Help:
    first = str(BIN / start[0]) if start[0] in VENV_PROGRAMS else start[0]
    # Its own session, so a timeout ends the scripts' children too.
    process = subprocess.Popen([first, *start[1:], "--help"], cwd=REPO, env=ENV,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=HELP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return Help(None, f"timed out after {HELP_TIMEOUT_S} s")
    return Help(process.returncode, out + err)


def run_helps(programs) -> None:
    """The --help of each program not run yet, all at once (each thread
    waits on its process)."""
    todo = sorted({program.start for program in programs if startable(program) is None}
                  - HELPS.keys())
    with ThreadPoolExecutor(max_workers=8) as pool:
        HELPS.update(zip(todo, pool.map(run_help, todo), strict=True))


def startable(program: Program) -> str | None:
    """Why the program cannot start as the page starts it, or None."""
    if program.file is None:
        return None
    path = REPO / program.file
    if not path.is_file():
        return "no such file"
    if program.by_path and not os.access(path, os.X_OK):
        return "not executable, yet run by path (chmod +x, git update-index --chmod=+x)"
    if program.by_path and not path.read_bytes().startswith(b"#!"):
        return "no shebang (#!), yet run by path"
    return None


def subcommands(help_text: str) -> set[str]:
    """The subcommands a --help offers: argparse's {a,b,c} in its usage (not
    an option's choices), or the front door's `commands:` list."""
    usage = help_text.split("\n\n", 1)[0]
    found = {name for group in re.findall(r"(?<![\w-] )\{([\w,-]+)\}", usage)
             for name in group.split(",")}
    listed = re.search(r"^commands:\n((?:  .*\n?)+)", help_text, re.M)
    if listed:
        found |= set(re.findall(r"^  ([\w-]+)  ", listed[1], re.M))
    return found


def why_not_running(programs: tuple[Program, ...]) -> str | None:
    for program in programs:
        if why := startable(program):
            return f"{program.name}: {why}"
        if HELPS[program.start].code != 0:
            return f"{program.name}: --help: {last_line(HELPS[program.start])}"
    return None


def last_line(help_of: Help) -> str:
    lines = help_of.text.strip().splitlines()
    said = lines[-1] if lines else "nothing said"
    return said if help_of.code is None else f"exit {help_of.code}: {said}"


@dataclass
class Checked:
    """A use with its subcommands taken (`emulate_cluster.sh up`, `-m
    horovod_train mnist download`): the programs whose --help lists its
    options, and why it does not run (None: it runs)."""
    use: Use
    programs: tuple[Program, ...]
    args: list[Word]
    failure: str | None = None


def checked(uses: list[Use]) -> list[Checked]:
    """Each use's programs' --help run (all at once, once a session), then,
    in rounds, the subcommands' it names."""
    results = [Checked(use, use.programs, use.args) for use in uses]
    pending = results
    while pending:
        run_helps(program for result in pending for program in result.programs)
        pending = [result for result in pending if took_subcommand(result)]
    return results


def took_subcommand(result: Checked) -> bool:
    """Moves the use on to the subcommand it names (True: its --help is to
    run), or leaves it where it is, with its failure if any."""
    programs, args = result.programs, result.args
    result.failure = why_not_running(programs)
    if result.failure or len(programs) > 1 or not args or args[0].text.startswith("-"):
        return False
    offered = subcommands(HELPS[programs[0].start].text)
    if not offered:
        return False
    if args[0].text not in offered:
        result.failure = (f"{programs[0].name}: no subcommand {args[0].text} "
                          f"(its --help offers {', '.join(sorted(offered))})")
        return False
    result.programs, result.args = (programs[0].with_subcommand(args[0].text),), args[1:]
    return True


def program_failures(uses: list[Use]) -> list[str]:
    return list(dict.fromkeys(f"{c.use.page}:{c.use.at.line}: {c.failure}"
                              for c in checked(uses) if c.failure))


def option_failures(uses: list[Use]) -> list[str]:
    failures = []
    for c in checked(uses):
        if c.failure:
            continue  # a program that does not run is the other test's
        text = "\n".join(HELPS[program.start].text for program in c.programs)
        for option in options_given(c.args):
            if not re.search(rf"(?<![\w-]){re.escape(option.text)}(?![\w-])", text):
                failures.append(f"{c.use.page}:{option.line}: {names(c.programs)}: "
                                f"option {option.text} not in its --help")
    return list(dict.fromkeys(failures))


def names(programs: tuple[Program, ...]) -> str:
    """scripts/launch.sh (or horovodrun's): its options and those it passes on."""
    first, *others = [program.name for program in programs]
    return first + "".join(f" (or {other}'s)" for other in others)


def code_text() -> str:
    """The code's files, where an HVT_ variable is read (not the docs, the
    tests, nor benchmarks/results/, which records runs)."""
    texts = []
    for folder in CODE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            parts = path.relative_to(REPO).parts
            if not path.is_file() or "__pycache__" in parts or parts[:2] == ("benchmarks",
                                                                              "results"):
                continue
            data = path.read_bytes()
            if b"\0" not in data:  # text only
                texts.append(data.decode(errors="replace"))
    return "\n".join(texts)


def hvt_failures(commands, code: str) -> list[str]:
    return list(dict.fromkeys(
        f"{command.page}:{name.line}: {name.text} is set, yet read nowhere in "
        f"{', '.join(f + '/' for f in CODE_FOLDERS)}"
        for command in commands for name in hvt_variables_set(command)
        if not re.search(rf"\b{name.text}\b", code)))


def link_failures(page: str, text: str) -> list[str]:
    """Each relative link's file exists (relative to the page), and its
    #anchor is a heading of the .md page it names."""
    failures = []
    for link in links(text):
        target = link.text
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue  # http(s), mailto: not checked here (no network)
        file, _, anchor = unquote(target).partition("#")
        if not file:  # this page's own
            if anchor not in anchors(text):
                failures.append(f"{page}:{link.line}: link {target}: no heading #{anchor} here")
            continue
        # GitHub reads /path from the checkout's root, others from the page's folder.
        base = REPO if file.startswith("/") else (REPO / page).parent
        path = base / file.lstrip("/")
        if not path.exists():
            failures.append(f"{page}:{link.line}: link {target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            failures.append(f"{page}:{link.line}: link {target}: no heading #{anchor} "
                            f"in {file}")
    return failures


def report(failures: list[str]) -> str:
    return f"{len(failures)} failure(s):\n" + "\n".join(failures)


COMMANDS = all_commands()
USES = [use for command in COMMANDS if not command.illustrative for use in uses_of(command)]


def test_the_pages_hold_commands_of_ours_to_check():
    """The checks below pass on nothing if the reading finds nothing."""
    checked_commands = {(use.page, use.at.line) for use in USES}
    assert len(COMMANDS) >= 80 and len(checked_commands) >= 50 and len(USES) >= 80, (
        len(COMMANDS), len(checked_commands), len(USES))
    assert {use.page for use in USES} >= {"README.md", "docs/benchmarks.md", "docs/trainer.md"}


def test_every_program_the_pages_run_exists_and_answers_help():
    failures = program_failures(USES)
    assert not failures, report(failures)


def test_every_option_the_pages_pass_is_one_its_program_lists():
    failures = option_failures(USES)
    assert not failures, report(failures)


def test_every_hvt_variable_the_pages_set_is_read_by_the_code():
    failures = hvt_failures(COMMANDS, code_text())
    assert not failures, report(failures)


def test_every_link_and_anchor_of_the_pages_resolves():
    failures = [failure for path in PAGES
                for failure in link_failures(page_name(path), path.read_text())]
    assert not failures, report(failures)


SYNTHETIC_PAGE = """# A page

## Run it

```bash
# a comment, then a command over two lines
benchmarks/predict_scaling.py --layouts 1x1,2x1 \\
    --inter-gbits 25
python benchmarks/predict_scalings.py --help
HVT_NO_SUCH_SETTING=1 scripts/emulate_cluster.sh frobnicate
```

<!-- illustrative -->
```bash
sbatch --my-site-option scripts/slurm/no_such.sbatch --no-such-option
```

```console
$ horovodrun -np 2 -H localhost:2 python horovod_train/pytorch_mnist.py --epoch 1
epoch 1: --not-an-option in the output
```

```python
python benchmarks/no_such.py  # not a shell block
```

[ok](#run-it), [ok too](../pyproject.toml), [gone](#walk-it), [moved](no_such.md)
"""


def test_the_checks_catch_a_broken_page_at_its_lines():
    """A renamed option, a moved script, an unknown subcommand and setting,
    a near-miss option after horovodrun, a broken anchor and link: each
    named at its line; the illustrative block and the python block not."""
    commands = page_commands("docs/synthetic.md", SYNTHETIC_PAGE)
    uses = [use for command in commands if not command.illustrative
            for use in uses_of(command)]
    assert program_failures(uses) == [
        "docs/synthetic.md:9: benchmarks/predict_scalings.py: no such file",
        "docs/synthetic.md:10: scripts/emulate_cluster.sh: no subcommand frobnicate "
        "(its --help offers down, exec, shape, status, up)"]
    assert option_failures(uses) == [
        "docs/synthetic.md:8: benchmarks/predict_scaling.py: option --inter-gbits "
        "not in its --help",
        "docs/synthetic.md:19: horovod_train/pytorch_mnist.py: option --epoch "
        "not in its --help"]
    assert hvt_failures(commands, code_text()) == [
        "docs/synthetic.md:10: HVT_NO_SUCH_SETTING is set, yet read nowhere in "
        "horovod_train/, scripts/, docker/, benchmarks/"]
    assert link_failures("docs/synthetic.md", SYNTHETIC_PAGE) == [
        "docs/synthetic.md:27: link #walk-it: no heading #walk-it here",
        "docs/synthetic.md:27: link no_such.md: no such file"]


def test_anchors_follow_githubs_rules():
    page = "# Setup: the `.venv`, step 1\n## Setup\n## Setup\n```bash\n# not a heading\n```\n"
    assert anchors(page) == {"setup-the-venv-step-1", "setup", "setup-1"}

"""One way to start each program: every program is a module of the package
with a cli(); the commands users type are thin files of the checkout that
start it, shell commands through scripts/python.sh -m, the Python files
run by path (the trainers, benchmarks/*.py) by putting their checkout first
on sys.path. No console scripts (docs/development.md)."""

import ast
import importlib.util
import re
from pathlib import Path

import pytest
from conftest import REPO

STARTER = REPO / "scripts/python.sh"
SHELL_COMMANDS = sorted([*REPO.glob("scripts/**/*.sh"), REPO / "scripts/slurm/horovod.sbatch",
                         REPO / "benchmarks/run_matrix.sh"])
SHELL_COMMANDS.remove(STARTER)
TRAINERS = sorted(REPO.glob("horovod_train/*_mnist.py"))
BENCHMARK_FILES = sorted(REPO.glob("benchmarks/*.py"))
MODULE_RUN = re.compile(r"python\.sh\"? -m (horovod_train[\w.]*)")


def program_modules(text: str) -> list[str]:
    return MODULE_RUN.findall(text)


def test_the_package_is_imported_from_the_checkout_only_by_files_run_by_path():
    rewriting = {path.relative_to(REPO).as_posix()
                 for path in REPO.glob("horovod_train/**/*.py") if "sys.path" in path.read_text()}
    assert rewriting == {path.relative_to(REPO).as_posix() for path in TRAINERS}
    assert not list(REPO.glob("scripts/**/*.py")), "programs live in the package"


@pytest.mark.parametrize("command", SHELL_COMMANDS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_shell_commands_start_python_through_python_sh_only(command):
    text = command.read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    # No interpreter started by hand, and no file of the package run by path
    # but a trainer (the demo's and the usage texts' horovodrun commands).
    assert not re.search(r'exec "?\$\{?python|exec "?\$\{HVT_PYTHON|exec python3?\b', code), command
    for path in re.findall(r"(?:horovod_train|benchmarks)/[\w/]+\.py", code):
        assert REPO / path in TRAINERS, f"{command.name} runs {path} by path"
    for module in program_modules(code):
        spec = importlib.util.find_spec(module)
        assert spec is not None, f"{command.name}: no module {module}"
        source = Path(spec.origin).read_text()
        has_cli = re.search(r"^(def cli\(|from horovod_train[\w.]* import cli$)", source, re.M)
        assert has_cli and 'if __name__ == "__main__":\n    cli()' in source, module


def test_every_program_module_is_started_by_a_command():
    """Each module with a cli() has its command: a shell command, a file run
    by path, a program that starts it with -m, or, for the data tool,
    `python -m horovod_train.mnist` as the docs give it."""
    sources = [path.read_text() for path in REPO.glob("horovod_train/**/*.py")]
    started = {m for command in SHELL_COMMANDS for m in program_modules(command.read_text())}
    started |= {m for source in sources for m in re.findall(r'"-m", "(horovod_train[\w.]*)"',
                                                           source)}
    started |= {f"horovod_train.{path.stem}" for path in TRAINERS}
    started |= {f"benchmarks.{path.stem}" for path in BENCHMARK_FILES}
    started |= {"horovod_train.mnist"}
    # An entry module that takes its cli() from another starts that one.
    started |= {m for source in sources
                for m in re.findall(r"^from (horovod_train[\w.]*) import cli\b", source, re.M)}
    with_cli = {".".join(path.relative_to(REPO).with_suffix("").parts)
                for path in REPO.glob("horovod_train/**/*.py")
                if re.search(r"^(def cli\(|from horovod_train[\w.]* import cli$)",
                             path.read_text(), re.M)}
    # Each command's module has a cli(), and none is left without a command.
    assert with_cli == started, with_cli - started


@pytest.mark.parametrize("path", BENCHMARK_FILES, ids=lambda p: p.name)
def test_benchmark_files_are_thin_commands_of_their_module(path):
    tree = ast.parse(path.read_text())
    imports = [node for node in tree.body if isinstance(node, ast.ImportFrom)
               and node.module and node.module.startswith("horovod_train")]
    assert [(node.module, [a.name for a in node.names]) for node in imports] == [
        (f"benchmarks.{path.stem}", ["cli"])]
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    code = path.read_text().splitlines()[tree.body[1].lineno - 1:]
    assert not functions and len(code) <= 12, code


def test_no_console_scripts():
    pyproject = (REPO / "pyproject.toml").read_text()
    assert not re.search(r"^\[project\.(gui-)?scripts\]", pyproject, re.M)

"""One way to start each program: every program is a module of the package
with a cli(), and the package has one front door, `python -m horovod_train
COMMAND` (horovod_train/__main__.py's table; the console script
horovod-train is the same). The shell commands start it through
scripts/python.sh; the trainers' files, run by path as Horovod's docs run
examples, put their checkout first on sys.path through one helper. The
layers: core/ imports no framework's part nor the launchers, and the
package imports nothing of the lab (benchmarks/) (docs/development.md)."""

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from horovod_train.__main__ import COMMANDS

STARTER = REPO / "scripts/python.sh"
SHELL_COMMANDS = sorted([*REPO.glob("scripts/**/*.sh"), REPO / "scripts/slurm/horovod.sbatch",
                         *REPO.glob("benchmarks/*.sh")])
SHELL_COMMANDS.remove(STARTER)
TRAINERS = sorted(REPO.glob("horovod_train/*_mnist.py"))
PYTHON_STARTS = re.compile(r"python\.sh\"? -m ([\w.]+)(?: ([\w-]+))?")
HAS_CLI = re.compile(r"^(def cli\(\)|from horovod_train[\w.]* import cli$)", re.M)


def module_of(path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def test_only_the_trainers_files_put_the_checkout_on_sys_path_through_one_helper():
    rewriting = {path.relative_to(REPO).as_posix()
                 for path in [*REPO.glob("horovod_train/**/*.py"), *REPO.glob("benchmarks/*.py")]
                 if "sys.path" in path.read_text()}
    # rank_script.py puts a user's script's own folder first, as `python SCRIPT` does.
    assert rewriting == {"horovod_train/checkout_first.py", "horovod_train/core/rank_script.py"}
    for trainer in TRAINERS:
        text = trainer.read_text()
        assert re.search(r"^if not __package__:.*\n(    .*\n|\n)*        import checkout_first\b",
                         text, re.M), trainer.name
        assert len(text.split('"""', 2)[2].strip().splitlines()) <= 16, trainer.name
    assert not list(REPO.glob("scripts/**/*.py")), "programs live in the package"


@pytest.mark.parametrize("command", SHELL_COMMANDS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_shell_commands_start_the_front_door_through_python_sh_only(command):
    text = command.read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    # No interpreter started by hand, and no file of the package run by path
    # but a trainer (the demo's and the usage texts' horovodrun commands).
    assert not re.search(r'exec "?\$\{?python|exec "?\$\{HVT_PYTHON|exec python3?\b', code), command
    for path in re.findall(r"(?:horovod_train|benchmarks)/[\w/]+\.py", code):
        assert REPO / path in TRAINERS, f"{command.name} runs {path} by path"
    for module, name in PYTHON_STARTS.findall(code):
        if command.parent.name == "benchmarks":  # the lab's, not commands of the product
            assert module == f"benchmarks.{command.stem.removeprefix('run_')}" and not name
        else:
            assert module == "horovod_train" and name in COMMANDS, (command.name, module, name)


def test_every_command_of_the_front_door_is_a_module_with_a_cli():
    """And every module of the package with a cli() is a command, or a
    program another one starts with -m (the lab's matrix starts launch.hosts
    on each host)."""
    sources = [path.read_text() for path in [*REPO.glob("horovod_train/**/*.py"),
                                              *REPO.glob("benchmarks/*.py")]]
    started = {module for module, _ in COMMANDS.values()}
    started |= {m for source in sources for m in re.findall(r'"-m", "(horovod_train[\w.]*)"',
                                                           source)}
    # An entry module that takes its cli() from another starts that one.
    started |= {m for source in sources
                for m in re.findall(r"^from (horovod_train[\w.]*) import cli$", source, re.M)}
    # The front door itself (launch_cluster starts it in a container), and
    # the network probe's host part, a script by design: it runs under a
    # bare python3 on every host (its __main__ block, no cli()).
    started -= {"horovod_train", "horovod_train.core.interfaces"}
    with_cli = {module_of(path) for path in REPO.glob("horovod_train/**/*.py")
                if HAS_CLI.search(path.read_text())}
    assert with_cli == started, with_cli ^ started
    assert {module_of(path) for path in TRAINERS} <= started


def test_the_front_door_lists_its_commands_and_refuses_others_in_one_line():
    listed = subprocess.run([sys.executable, "-m", "horovod_train", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0
    for name in COMMANDS:
        assert re.search(rf"^  {name} +\S", listed.stdout, re.M), name
    unknown = subprocess.run([sys.executable, "-m", "horovod_train", "frobnicate"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and not unknown.stdout
    assert unknown.stderr.count("\n") == 1 and "no command 'frobnicate'" in unknown.stderr


def test_the_console_script_is_the_front_door():
    pyproject = (REPO / "pyproject.toml").read_text()
    tables = re.findall(r"^\[project\.(?:gui-)?scripts\]\n((?:[^\[\n].*\n)*)", pyproject, re.M)
    entries = [line for line in "".join(tables).splitlines() if line and line[0] != "#"]
    assert entries == ['horovod-train = "horovod_train.__main__:main"']


def test_core_imports_no_framework_nor_launcher_and_the_package_nothing_of_the_lab():
    for path in REPO.glob("horovod_train/**/*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        assert not {m for m in imported if m.split(".")[0] == "benchmarks"}, path
        if path.parent.name == "core":
            climbing = {m for m in imported if re.match(
                r"horovod_train\.(launch|torch|tensorflow|mxnet|emulation|image)\b", m)}
            assert not climbing, (path.name, climbing)


def test_the_installed_package_is_the_product_and_the_lab_is_the_checkouts():
    """pyproject installs horovod_train's product packages: every package
    of it but the emulation, and nothing of benchmarks/."""
    listed = re.search(r"^packages = \[(.*?)\]", (REPO / "pyproject.toml").read_text(),
                       re.M | re.S)[1]
    installed = set(re.findall(r'"([\w.]+)"', listed))
    packages = {module_of(path.parent) for path in REPO.glob("horovod_train/**/__init__.py")}
    assert installed == packages - {"horovod_train.emulation"}


def test_a_command_of_the_lab_outside_a_checkout_is_one_line(monkeypatch, capsys):
    """An installation without the emulation (the wheel) says where the
    command lives instead of a traceback."""
    from horovod_train import __main__ as front_door

    monkeypatch.setitem(front_door.COMMANDS, "emulate-cluster",
                        ("horovod_train.absent_lab.cluster", "hosts emulated on this machine "
                                                             "(scripts/emulate_cluster.sh)"))
    with pytest.raises(SystemExit) as refused:
        front_door.main(["emulate-cluster", "up"])
    assert refused.value.code == 2
    assert capsys.readouterr().err == (
        "python -m horovod_train: emulate-cluster runs from a checkout of the project (hosts "
        "emulated on this machine (scripts/emulate_cluster.sh)); this installation has the "
        "product alone\n")


def project_aliases(tree: ast.Module) -> dict[str, str]:
    """A file's names for the project's modules: `from horovod_train.x import
    y [as z]` and `import horovod_train.x as z` (a name that is no module,
    such as an imported function, is left out by the caller)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("horovod_train", "benchmarks")):
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.startswith(("horovod_train", "benchmarks")):
                    aliases[alias.asname] = alias.name
    return aliases


def module_file(module: str) -> Path | None:
    """The checkout's file of a dotted module name; None for a name inside a
    module (a function, a class) or outside the checkout."""
    path = REPO.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def top_level_names(path: Path) -> set[str]:
    """What a module defines or imports, at any depth: functions, classes,
    assigned names (tuples too) and imported names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
    return names


def test_every_attribute_taken_from_a_project_module_is_there():
    """`module.name` for each of the project's modules a file imports, read
    without importing anything: a name moved to another module (a refactor
    that missed a caller) fails here, not on the one machine whose path
    calls it (a GPU host, say)."""
    missing = []
    for path in [*REPO.glob("horovod_train/**/*.py"), *REPO.glob("benchmarks/*.py")]:
        tree = ast.parse(path.read_text())
        aliases = project_aliases(tree)
        used = {(node.value.id, node.attr) for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases}
        for name, attr in sorted(used):
            source = module_file(aliases[name])
            if source and attr not in top_level_names(source):
                missing.append(f"{path.relative_to(REPO)}: {name}.{attr} ({aliases[name]})")
    assert not missing, "\n".join(missing)

"""The knobs the docs name are real: every HOROVOD_* and NCCL_* variable in
README.md and docs/ is read by the installed Horovod (its compiled library
or its launcher), by NCCL's library, or by this project's code; and the
table of Horovod's knobs beside ours (docs/trainer.md) names our options
as the code spells them."""

import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest
from conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
VARIABLE = re.compile(rb"\b(?:HOROVOD|NCCL)_[A-Z0-9_]*[A-Z0-9]\b")


def package_dirs(name: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:  # its parent is not installed
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


@cache
def names_in(paths: tuple[Path, ...]) -> frozenset[str]:
    found = set()
    for path in paths:
        found |= {m.decode() for m in VARIABLE.findall(path.read_bytes())}
    return frozenset(found)


@cache
def horovods_code() -> bytes:
    """Horovod's launcher and Python sources, and one framework's compiled
    library (each holds all of Horovod's common code)."""
    files = [path for horovod in package_dirs("horovod")
             for path in (*horovod.glob("runner/**/*.py"), *horovod.glob("common/*.py"),
                          *horovod.glob("torch/mpi_lib_v2*.so"))]
    return b"\n".join(path.read_bytes() for path in files)


@cache
def nccls_library() -> bytes:
    return b"".join(path.read_bytes() for nccl in package_dirs("nvidia.nccl")
                    for path in nccl.glob("lib/libnccl.so*"))


@cache
def our_names() -> frozenset[str]:
    files = [path for folder in ("horovod_train", "scripts", "docker", "benchmarks")
             for path in (REPO / folder).rglob("*") if path.is_file()
             and path.suffix in (".py", ".sh", ".sbatch", ".yaml", ".conf", "")
             and "__pycache__" not in path.parts]
    return names_in(tuple(files))


def named_in_docs() -> list[tuple[str, str]]:
    return sorted({(doc.name, name.decode()) for doc in DOCS
                   for name in VARIABLE.findall(doc.read_bytes())})


@pytest.mark.parametrize("doc, name", named_in_docs())
def test_every_variable_the_docs_name_is_read_by_some_code(doc, name):
    if name.startswith("NCCL_") and not nccls_library():
        pytest.skip("no NCCL library in this environment")
    if re.fullmatch(r"HOROVOD_WITH(OUT)?_[A-Z]+", name):
        # Horovod's build switches, one per framework: the build recipe sets
        # them by name (docker/env/build_horovod.py), Horovod's setup.py reads them.
        recipe = (REPO / "docker" / "env" / "build_horovod.py").read_text()
        assert "HOROVOD_WITH{" in recipe
        return
    # A name that only prefixes others in the docs ("HOROVOD_TRAIN_*") counts too.
    assert (name.encode() in horovods_code() or name.encode() in nccls_library()
            or any(n == name or n.startswith(name + "_") for n in our_names())), name


def knob_rows() -> list[list[str]]:
    text = (REPO / "docs" / "trainer.md").read_text()
    section = text.split("## Horovod's own knobs beside ours", 1)[1].split("\n## ", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| `")]


def test_the_knobs_table_names_our_options_as_the_code_does():
    rows = knob_rows()
    assert len(rows) >= 10
    sources = "\n".join(path.read_text() for path in (REPO / "horovod_train").rglob("*.py"))
    for horovods, _, ours, _ in rows:
        assert re.fullmatch(r"`(HOROVOD|NCCL)_[A-Z_]+`", horovods), horovods
        for option in re.findall(r"`(--[a-z-]+)`", ours):
            assert f'"{option}"' in sources, option
        for path in re.findall(r"`([\w/]+\.py)`", ours):
            assert (REPO / path).is_file(), path

"""The project's own environment variables have one prefix (HVT_), and
docs/settings.md lists each of them once, with the files that read it."""

import re
import subprocess

from conftest import REPO

PREFIX = "HVT_"

# Names of other programs the code reads: the tools' own and the platform's.
# pip's and uv's: the recipe hands pip's settings to uv (docker/env/setup.sh).
FOREIGN_PREFIXES = ("HOROVOD_", "OMPI_", "NCCL_", "SLURM_", "SLURMD_", "PIP_", "UV_")
FOREIGN = {"CUDA_HOME", "CXX", "HOME", "PATH", "PYTHONPATH", "XDG_CACHE_HOME",
           "LD_LIBRARY_PATH", "LD_PRELOAD", "GLIBC_TUNABLES", "OMP_NUM_THREADS",
           "TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS", "CUDA_VISIBLE_DEVICES",
           "SSL_CERT_FILE", "VIRTUAL_ENV",
           "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}  # torchrun's, in the DDP baseline

PYTHON_READ = re.compile(
    r'\b(?:environ|env)(?:\.get|\.setdefault|\.pop)?\(\s*"([A-Z][A-Z0-9_]*)"'
    r'|\b(?:environ|env)\[\s*"([A-Z][A-Z0-9_]*)"\]'
    r'|"([A-Z][A-Z0-9_]*)" (?:not )?in (?:os\.)?environ\b'
    r'|_ENV = "([A-Z][A-Z0-9_]*)"')
SHELL_READ = re.compile(r'\$\{([A-Z][A-Z0-9_]*)(?::?[-=+?][^}]*)?\}')
# A Dockerfile's ${...} are its build arguments (--build-arg), not the
# environment: only the ones with the project's prefix are its settings.
DOCKERFILE_READ = re.compile(rf"^ARG ({PREFIX}[A-Z0-9_]*)\b", re.M)

# The project's patches to Horovod read its settings in Python and C++: their
# added lines.
PATCH_READ = re.compile(r"^\+.*?(?:\b(?:environ|env)\.get\(\s*|\bgetenv\()['\"]("
                        + PREFIX + r"[A-Z0-9_]*)['\"]", re.M)
# The tests read their own settings with os.environ.get; the other forms, in
# a test, build or check a program's environment.
TESTS_READ = re.compile(r'\bos\.environ\.get\(\s*"([A-Z][A-Z0-9_]*)"')


def names_read() -> dict[str, set[str]]:
    """Every environment variable the code reads (and the Dockerfiles' HVT_
    build arguments), and the files that read it."""
    files = subprocess.run(["git", "ls-files", "horovod_train", "scripts", "benchmarks",
                            "docker", "tests"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    found: dict[str, set[str]] = {}
    for name in files:
        if name.startswith("benchmarks/results/"):
            continue
        if name.endswith(".patch"):
            pattern = PATCH_READ
        elif "Dockerfile" in name:
            pattern = DOCKERFILE_READ
        elif name.startswith("tests/"):
            pattern = TESTS_READ
        elif name.endswith(".py"):
            pattern = PYTHON_READ
        elif name.endswith((".sh", ".sbatch", ".yaml")):
            pattern = SHELL_READ
        else:
            continue
        text = (REPO / name).read_text(errors="replace")
        for match in pattern.finditer(text):
            found.setdefault(next(g for g in match.groups() if g), set()).add(name)
    return found


def test_the_projects_own_variables_have_its_prefix():
    read = names_read()
    assert {"HVT_MALLOC", "HVT_PYTHON", "HVT_SSH_PORT", "HVT_RESUME"} <= read.keys()
    strays = {name: sorted(where) for name, where in read.items()
              if not name.startswith(PREFIX) and name not in FOREIGN
              and not name.startswith(FOREIGN_PREFIXES)}
    assert strays == {}


def settings_table() -> dict[str, set[str]]:
    """docs/settings.md's rows: each setting and the files its third
    column names (`path`, ...)."""
    text = (REPO / "docs" / "settings.md").read_text()
    rows: dict[str, set[str]] = {}
    for line in text.splitlines():
        if match := re.match(rf"^\| `({PREFIX}[A-Z0-9_]+)` \|", line):
            assert match[1] not in rows, f"{match[1]} has two rows"
            cells = line.split(" | ")
            assert len(cells) == 4, line
            rows[match[1]] = set(re.findall(r"`([^`]+)`", cells[2]))
    return rows


def test_the_settings_table_is_every_setting_the_code_reads():
    """Each HVT_ name read anywhere has one row in docs/settings.md, each row
    names one that is read, and its "read by" column names exactly the files
    that read it."""
    read = {name: where for name, where in names_read().items() if name.startswith(PREFIX)}
    table = settings_table()
    unlisted = sorted(read.keys() - table.keys())
    unread = sorted(table.keys() - read.keys())
    assert (unlisted, unread) == ([], [])
    wrong = {name: {"table": sorted(table[name]), "code": sorted(read[name])}
             for name in read if table[name] != read[name]}
    assert wrong == {}

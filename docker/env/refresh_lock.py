"""Refresh the lock: resolve requirements/*.txt again for each Python the
lock serves, write constraints.txt, and say what moved.

    .venv/bin/python docker/env/refresh_lock.py [--upgrade PACKAGE ...] [--check]

Every package moves to the newest release its requirements allow, or with
--upgrade only the packages named (the others keep their pins where they
still can). Each Python of lock.PYTHONS is resolved on its own, with the
frameworks lock.FRAMEWORK_PYTHONS gives it; a package whose version differs
between them gets a python_version marker. The lock's sections follow the
requirement groups that bring their packages in; the CUDA compiler's pins
are those of the cuda-toolkit release torch's pins name, and tf-keras's is
TensorFlow's release (setup.sh installs it without its dependencies). The header (the
lines before the first pin) is kept as written; the CUDA 12 variant
(constraints-cuda12.txt) is left alone: it holds torch's last CUDA 12
release. Needs uv (setup.sh puts it in the venv) and the package index.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lock import FRAMEWORK_PYTHONS, LOCK, PYTHONS, pin_name, python_key

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements"
PLATFORM = "x86_64-manylinux_2_28"
# The lock's sections, in order: a title (none for the first) and what
# brings their packages in: requirement groups (requirements/NAME.txt) and
# lines of their own.
SECTIONS = [
    (None, ["core", "horovod", "build", "plots", *FRAMEWORK_PYTHONS], []),
    ("the installer setup.sh installs the rest with (pip puts it in the venv first)",
     [], ["uv"]),
    ("compiled here from source (mpi4py against the machine's OpenMPI) and what\n"
     "# building it needs", ["mpi"], ["build", "Cython", "setuptools", "wheel"]),
    ("test and lint tools (kubernetes-validate and jsonschema check the\n"
     "# Kubernetes manifest, docker/k8s/)", ["test", "slurm"], []),
]
KERAS_2 = "tf-keras"
NVCC_TITLE = ("CUDA compiler for Horovod's NCCL build (build_horovod.py installs it apart\n"
              "# from the venv, as cuda-toolkit[nvcc] with torch's CCCL): the toolkit\n"
              "# torch's own cuda-toolkit pin above names, so Horovod compiles against\n"
              "# torch's CUDA.")


class RefreshFailed(Exception):
    pass


def uv() -> str:
    found = shutil.which("uv", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                  f"{os.environ.get('PATH', '')}")
    if found is None:
        raise RefreshFailed("uv not found beside this Python or on PATH; run it with the "
                            "venv's Python (.venv/bin/python) after scripts/setup.sh")
    return found


def section_inputs(python: str, upto: int) -> list[str]:
    """The requirement lines of sections [0, upto] for one Python: the
    frameworks it serves only."""
    lines = []
    for _, groups, own in SECTIONS[:upto + 1]:
        for group in groups:
            if group in FRAMEWORK_PYTHONS and python not in FRAMEWORK_PYTHONS[group]:
                continue
            lines.append(f"-r {REQUIREMENTS / f'{group}.txt'}")
        lines.extend(own)
    return lines


def compile_pins(python: str, inputs: list[str], preferences: dict[str, str],
                 upgrade: list[str] | None, constraints: dict[str, str] | None = None
                 ) -> dict[str, str]:
    """uv's resolution of the inputs for one Python on Linux x86_64, as
    {normalised name: version}; the preferences' pins kept where allowed
    unless upgraded."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp, "requirements.in")
        requirements.write_text("\n".join(inputs) + "\n")
        output = Path(tmp, "out.txt")
        command = [uv(), "pip", "compile", "--quiet", "--no-header", "--no-annotate",
                   "--python-version", python, "--python-platform", PLATFORM,
                   str(requirements), "-o", str(output)]
        if preferences and upgrade is not None:
            # uv keeps what an existing output file pins, unless upgraded.
            output.write_text("".join(f"{n}=={v}\n" for n, v in sorted(preferences.items())))
            command += [arg for name in upgrade for arg in ("--upgrade-package", name)]
        if constraints:
            pinned = Path(tmp, "constraints.txt")
            pinned.write_text("".join(f"{n}=={v}\n" for n, v in constraints.items()))
            command += ["-c", str(pinned)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RefreshFailed(f"resolving for Python {python} failed: "
                                + (result.stderr.strip().splitlines() or ["?"])[-1])
        return read_pins(output.read_text())


def read_pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        name = pin_name(line)
        if name:
            pins[name] = line.split("#")[0].split(";")[0].split("==", 1)[1].strip()
    return pins


def current_pins(text: str) -> dict[str, dict[str, str]]:
    """The lock's pins as {name: {python: version}}, markers read for the
    Pythons the lock serves."""
    pins: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        name = pin_name(line)
        if not name:
            continue
        version = line.split("#")[0].split(";")[0].split("==", 1)[1].strip()
        marker = line.split("#")[0].split(";", 1)[1].strip() if ";" in line else ""
        for python in PYTHONS:
            if not marker or marker_holds(marker, python):
                pins.setdefault(name, {})[python] = version
    return pins


def marker_holds(marker: str, python: str) -> bool:
    match = re.fullmatch(r'python_version\s*(==|>=|<|<=|>|!=)\s*"([\d.]+)"', marker)
    if not match:
        raise RefreshFailed(f"the lock has a marker this refresh does not read: {marker}")
    op, bound = match.groups()
    left, right = python_key(python), python_key(bound)
    return {"==": left == right, ">=": left >= right, "<": left < right,
            "<=": left <= right, ">": left > right, "!=": left != right}[op]


def marker(pythons: list[str]) -> str:
    """The python_version marker of a set of the lock's Pythons."""
    if pythons == PYTHONS[-len(pythons):]:
        return f'python_version >= "{pythons[0]}"'
    if pythons == PYTHONS[:len(pythons)]:
        return f'python_version < "{PYTHONS[len(pythons)]}"'
    if len(pythons) == 1:
        return f'python_version == "{pythons[0]}"'
    raise RefreshFailed(f"no single marker for Pythons {', '.join(pythons)}")


def pin_lines(pins: dict[str, dict[str, str]]) -> list[str]:
    """One line per package, or one per version with its Pythons' marker."""
    lines = []
    for name in sorted(pins):
        by_version: dict[str, list[str]] = {}
        for python in PYTHONS:
            if python in pins[name]:
                by_version.setdefault(pins[name][python], []).append(python)
        if len(by_version) == 1:
            lines.append(f"{name}=={next(iter(by_version))}")
        else:
            lines.extend(f"{name}=={version}; {marker(pythons)}"
                         for version, pythons in by_version.items())
    return lines


def refresh(old_text: str, upgrade: list[str] | None) -> tuple[str, list[str]]:
    """The new lock's text and what moved."""
    old = current_pins(old_text)
    resolved: dict[str, dict[str, str]] = {}  # python: pins
    for python in PYTHONS:
        preferences = {name: by_python[python] for name, by_python in old.items()
                       if python in by_python}
        resolved[python] = compile_pins(python, section_inputs(python, len(SECTIONS) - 1),
                                        preferences, upgrade)
    # Each package in the first section whose inputs bring it in.
    section_of: dict[str, int] = {}
    for index in range(len(SECTIONS)):
        for python in PYTHONS:
            for name in compile_pins(python, section_inputs(python, index), {}, None,
                                     constraints=resolved[python]):
                section_of.setdefault(name, index)
    sections: list[dict[str, dict[str, str]]] = [{} for _ in SECTIONS]
    for python, pins in resolved.items():
        for name, version in pins.items():
            sections[section_of.get(name, len(SECTIONS) - 1)].setdefault(name, {})[python] \
                = version
    # tf-keras (Keras 2 scripts' tf.keras) is installed without its dependencies,
    # which name the `tensorflow` package: pinned, not resolved, at TensorFlow's release.
    for python, pins in resolved.items():
        if "tensorflow-cpu" in pins:
            sections[0].setdefault(KERAS_2, {})[python] = pins["tensorflow-cpu"]
    toolkit = resolved[PYTHONS[0]].get("cuda-toolkit")
    nvcc: dict[str, dict[str, str]] = {}
    if toolkit:
        for name, version in compile_pins(PYTHONS[0], [f"cuda-toolkit[nvcc]=={toolkit}"],
                                          {}, None, constraints=resolved[PYTHONS[0]]).items():
            if name not in resolved[PYTHONS[0]]:
                nvcc[name] = {python: version for python in PYTHONS}
    header = []
    for line in old_text.splitlines():
        if pin_name(line):
            break
        header.append(line)
    body = [*header, *pin_lines(sections[0])]
    for (title, _, _), pins in zip(SECTIONS[1:], sections[1:], strict=True):
        body += [f"# {title}", *pin_lines(pins)]
    if nvcc:
        body += [f"# {NVCC_TITLE}", *pin_lines(nvcc)]
    new = current_pins("\n".join(body))
    return "\n".join(body) + "\n", moves(old, new)


def moves(old: dict[str, dict[str, str]], new: dict[str, dict[str, str]]) -> list[str]:
    """What moved, a line per package: `torch 2.14.1 -> 2.15.0`, `+ keras
    3.15.1`, `- tensorflow-estimator 2.15.0`, with the Pythons where it
    differs between them."""
    def shown(by_python: dict[str, str]) -> str:
        versions = set(by_python.values())
        if len(versions) == 1:
            return versions.pop()
        return ", ".join(f"{v} (Python {p})" for p, v in sorted(by_python.items()))
    lines = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            lines.append(f"- {name} {shown(old[name])}")
        elif name not in old:
            lines.append(f"+ {name} {shown(new[name])}")
        elif old[name] != new[name]:
            lines.append(f"  {name} {shown(old[name])} -> {shown(new[name])}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="refresh_lock.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upgrade", nargs="+", metavar="PACKAGE",
                        help="move only these packages (default: every package)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the lock would change")
    args = parser.parse_args(argv)
    old_text = LOCK.read_text()
    try:
        new_text, moved = refresh(old_text, args.upgrade)
    except (RefreshFailed, subprocess.TimeoutExpired) as err:
        print(f"refresh_lock.py: error: {err}", file=sys.stderr)
        return 2
    for line in moved or ["nothing moved"]:
        print(line)
    if new_text == old_text:
        return 0
    if args.check:
        print(f"refresh_lock.py: {LOCK.name} is not what its requirements resolve to now",
              file=sys.stderr)
        return 1
    partial = LOCK.with_suffix(".txt.partial")
    partial.write_text(new_text)
    partial.replace(LOCK)
    print(f"wrote {LOCK}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Horovod's own parallel tests, run on this environment's Horovod build:
each file under `horovodrun -np N -H localhost:N`, over each controller,
counted from rank 0's JUnit record, with each failure's first line.

    python benchmarks/upstream_tests.py --tests ~/src/horovod/test \\
        --out runs/upstream-tests.json
    python benchmarks/upstream_tests.py --tests ~/src/horovod/test --keras-3-idioms \\
        --files test_tensorflow2_keras.py,test_tensorflow_keras.py,test_keras.py

--tests is the `test` directory of a Horovod checkout at the build's
version (`git clone -b v0.28.1 https://github.com/horovod/horovod`): the
tests are Horovod's, read here, never part of this project. Some import
`parameterized` and `mock`, which the environment may not hold: the run
says so in one line (`pip install parameterized mock`, or PYTHONPATH to a
folder that has them). --keras-3-idioms runs a copy of the files with their
Keras 2 idioms turned into Keras 3's (KERAS_3_IDIOMS), so that what still
fails is Horovod's, not the test's way of calling Keras.
"""

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, UserError, run_main

FILES = ["test_tensorflow.py", "test_tensorflow2_keras.py", "test_tensorflow_keras.py",
         "test_keras.py", "test_tensorflow_process_sets.py", "test_process_sets_static.py",
         "test_timeline.py", "test_torch.py"]
CONTROLLERS = ("gloo", "mpi")

# Keras 2 idioms of Horovod's tests and their Keras 3 form (docs/trainer.md's
# table): (pattern, replacement), applied in order to each line.
KERAS_3_IDIOMS = [
    (r"\blr=", "learning_rate="),
    (r"keras\.optimizers\.legacy\.", "keras.optimizers."),
    (r",\s*experimental_run_tf_function=False", ""),
    (r"keras\.losses\.mean_squared_error\b", "keras.losses.MeanSquaredError()"),
    (r"keras\.losses\.MSE\b", "keras.losses.MeanSquaredError()"),
    (r"\bopt\.variables\(\)", "opt.variables"),
    (r"\.optimizer\.lr\b", ".optimizer.learning_rate"),
    # A Keras 3 optimizer's learning rate is an argument of its base class.
    (r"super\(\)\.__init__\(name=name, \*\*kwargs\)",
     "super().__init__(name=name, **{'learning_rate': 0.1, **kwargs})"),
    # ... and its update_step() is given the rate.
    (r"def update_step\(self, gradient, variable\):",
     "def update_step(self, gradient, variable, learning_rate=None):"),
    (r",\s*experimental_aggregate_gradients=False", ""),
    (r",\s*fused=False", ""),
    # TensorFlow 1's session config, built where TensorFlow 1 classes collect.
    (r"\btf\.ConfigProto\(", "tf.compat.v1.ConfigProto("),
    # tf.test's evaluate() takes no Keras 3 variable; numpy reads its value.
    (r"self\.evaluate\(([\w.]+)\.(moving_mean|moving_variance)\)", r"np.asarray(\1.\2)"),
    # A Keras 3 variable has no ref(): its id keys a dictionary.
    (r"([\w.]+)\.ref\(\)", r"id(\1)"),
]


def keras_3_copy(tests: Path, into: Path) -> Path:
    """A copy of `tests` whose parallel files have KERAS_3_IDIOMS applied."""
    shutil.copytree(tests, into, ignore=shutil.ignore_patterns("__pycache__", "data"))
    for path in (into / "parallel").glob("*.py"):
        text = path.read_text()
        for pattern, replacement in KERAS_3_IDIOMS:
            text = re.sub(pattern, replacement, text)
        path.write_text(text)
    return into


def package_versions() -> dict[str, str]:
    """The versions the tests ran against, read without importing them."""
    found = {}
    for name in ("horovod", "tensorflow", "tensorflow-cpu", "keras", "tf-keras", "torch",
                 "mxnet"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


# pytest on one rank (argv: the record folder, the timeout, the test file),
# its JUnit record named by the rank. Failed tests are in the record, so they
# exit 0: horovodrun ends every rank once one exits non-zero, and a rank that
# finished first would kill rank 0 before it wrote its record.
RANK_CODE = """\
import os, sys, pytest
records, timeout_s, test_file = sys.argv[1:]
rank = os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
code = pytest.main(["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--timeout", timeout_s,
                    f"--junitxml={records}/rank{rank}.xml", test_file])
sys.exit(0 if code == pytest.ExitCode.TESTS_FAILED else code)
"""


def rank_command(python: str, test_file: Path, record_dir: Path, timeout_s: int) -> list[str]:
    return [python, "-c", RANK_CODE, str(record_dir), str(timeout_s), str(test_file)]


def counts(record: Path) -> dict:
    """passed, failed, skipped and the failures' first lines, from a JUnit record."""
    suite = ET.parse(record).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    found = {"passed": 0, "failed": 0, "skipped": 0, "failures": {}}
    for case in suite.iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            found["failed"] += 1
            message = (problem.get("message") or problem.text or "").strip()
            found["failures"][case.get("name")] = (message.splitlines() or [""])[0][:300]
        elif case.find("skipped") is not None:
            found["skipped"] += 1
        else:
            found["passed"] += 1
    return found


def run_file(python: str, horovodrun: str, test_file: Path, controller: str, np_: int,
             timeout_s: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="upstream-tests-") as records:
        command = [horovodrun, "-np", str(np_), "-H", f"localhost:{np_}", f"--{controller}",
                   *rank_command(python, test_file, Path(records), timeout_s)]
        started = time.monotonic()
        try:
            result = subprocess.run(command, cwd=test_file.parent, capture_output=True,
                                    text=True, timeout=timeout_s * 4)
            tail = (result.stdout + result.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            tail = f"the file ran past {timeout_s * 4} s"
        took = round(time.monotonic() - started, 1)
        record = Path(records) / "rank0.xml"
        if not record.exists():
            return {"file": test_file.name, "controller": controller, "wall_s": took,
                    "error": "rank 0 wrote no record: " + (tail.strip().splitlines() or [""])[-1]}
        return {"file": test_file.name, "controller": controller, "wall_s": took,
                **counts(record)}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="upstream_tests.py", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=Path, required=True,
                        help="a Horovod checkout's test directory, at the build's version")
    parser.add_argument("--files", default=",".join(FILES),
                        help="comma-separated files of its parallel/ (default: %(default)s)")
    parser.add_argument("--controllers", default=",".join(CONTROLLERS),
                        help="gloo, mpi or both (default: %(default)s)")
    parser.add_argument("--np", type=int, default=2, dest="np_", help="ranks (default: 2)")
    parser.add_argument("--keras-3-idioms", action="store_true",
                        help="run a copy with the tests' Keras 2 idioms in Keras 3 form")
    parser.add_argument("--timeout-s", type=int, default=300,
                        help="per test (pytest-timeout); a file gets four times it")
    parser.add_argument("--out", type=Path, help="write the counts here as JSON")
    args = parser.parse_args(argv)
    parallel = args.tests / "parallel"
    files = [f for f in args.files.split(",") if f]
    missing = [f for f in files if not (parallel / f).is_file()]
    if not parallel.is_dir() or missing:
        raise UserError(f"--tests {args.tests}: no {', '.join(missing) or 'parallel/'} there; "
                        "give the test directory of a Horovod checkout")
    controllers = [c for c in args.controllers.split(",") if c]
    if not controllers or set(controllers) - set(CONTROLLERS):
        raise UserError(f"--controllers {args.controllers}: want gloo, mpi or gloo,mpi")
    python = sys.executable
    needed = sorted({"pytest_timeout"} | {
        m for f in files for m in re.findall(r"^(?:from|import)\s+(parameterized|mock)\b",
                                             (parallel / f).read_text(), re.M)})
    need = subprocess.run([python, "-c", f"import {', '.join(needed)}"],
                          capture_output=True, text=True)
    if need.returncode != 0:
        raise UserError(f"these tests need {', '.join(needed)} in {python}: "
                        f"{need.stderr.strip().splitlines()[-1]} (pip install "
                        f"{' '.join(n.replace('_', '-') for n in needed)})")
    horovodrun = str(Path(python).parent / "horovodrun")
    with tempfile.TemporaryDirectory(prefix="upstream-tests-copy-") as copy:
        tests = keras_3_copy(args.tests, Path(copy) / "test") if args.keras_3_idioms \
            else args.tests
        rows = []
        for name in files:
            for controller in controllers:
                row = run_file(python, horovodrun, tests / "parallel" / name, controller,
                               args.np_, args.timeout_s)
                rows.append(row)
                said = row.get("error") or (f"{row['passed']} passed, {row['failed']} failed, "
                                            f"{row['skipped']} skipped")
                print(f"{name} over {controller}: {said} ({row['wall_s']} s)", flush=True)
                for test, first_line in row.get("failures", {}).items():
                    print(f"  {test}: {first_line}", flush=True)
    if args.out:
        from benchmarks.machine import machine_record  # after the runs: it asks git

        atomic_write_json(args.out, {
            # The tests' folder as a placeholder: a record names no folder of its machine.
            "command": ["benchmarks/upstream_tests.py", "--tests", "HOROVOD_TESTS",
                        "--files", ",".join(files), "--controllers", ",".join(controllers),
                        "--np", str(args.np_), *(["--keras-3-idioms"] * args.keras_3_idioms)],
            "versions": package_versions(), "np": args.np_,
            "keras_3_idioms": args.keras_3_idioms,
            "tf_use_legacy_keras": os.environ.get("TF_USE_LEGACY_KERAS"),
            "runs": rows, "machine": machine_record()})
    return 0


if __name__ == "__main__":
    run_main(main, "upstream_tests.py")

"""How long setting up takes, as a user meets it, for one or more commits
side by side in one run. Run it through benchmarks/setup_times.sh:

    benchmarks/setup_times.sh
    benchmarks/setup_times.sh --revs b7fb18f,HEAD --out-dir runs/setup-times

For each commit, its phases run in order, each in a clone of that commit
under --work-dir (the clones and their caches are removed at the end):

    cold        a first clone, every cache empty: the test command's setup
                (scripts/setup.sh --frameworks pytorch,tensorflow,mxnet
                --gpu-ops none): downloads, mpi4py and Horovod compiled
    again       the same command again in that clone
    second      a second clone after it, its caches kept: scripts/demo.sh,
                the README's main job, set-up and training to its answer
    cold-demo   a third clone, every cache empty again: scripts/demo.sh

"Every cache" is pip's, uv's and this project's (Horovod's wheels, the
wheelhouse): XDG_CACHE_HOME points at a new folder. System packages are
what this machine has; a machine without OpenMPI and the compilers adds
apt's time to the cold phases. The demo trains on --t10k's digits where
given (no download). JSON and a table in --out-dir; the table is printed
last, with each phase's ratio to the first commit's.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import CHECKOUT, as_typed
from horovod_train.core.atomic import atomic_write_bytes, atomic_write_json
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main

PROG = "setup_times"
TEST_SETUP = ["scripts/setup.sh", "--frameworks", "pytorch,tensorflow,mxnet", "--gpu-ops", "none"]
DEMO = ["scripts/demo.sh"]
PHASES = {  # name: (clone, fresh caches, command)
    "cold": ("first", True, TEST_SETUP),
    "again": ("first", False, TEST_SETUP),
    "second": ("second", False, DEMO),
    "cold-demo": ("third", True, DEMO),
}
# Settings that would point a phase at this machine's own caches.
CACHE_SETTINGS = ("HVT_WHEEL_CACHE", "UV_CACHE_DIR", "PIP_CACHE_DIR", "HVT_PYTHON", "VIRTUAL_ENV")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=f"benchmarks/{PROG}.sh", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revs", default="HEAD",
                        help="comma-separated commits of this checkout to time, the first "
                             "the baseline of the ratios (default HEAD)")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated, in this order: {', '.join(PHASES)} "
                             "(again and second need cold first)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the clones and caches go (default: a new folder in the "
                             "system's temporary folder; about 20 GB per commit)")
    parser.add_argument("--t10k", type=Path, default=default_t10k(),
                        help="MNIST's test split (t10k-*-ubyte.gz) the demo trains on, "
                             "as HVT_MNIST_T10K_DIR; default: HVT_MNIST_T10K_DIR, else none "
                             "(the demo downloads MNIST)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds one phase may take (default 3600)")
    parser.add_argument("--out-dir", type=Path, default=Path("runs") / PROG,
                        help="where setup_times.json and setup_times.md go")
    args = parser.parse_args(argv)
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in args.phases if p not in PHASES]
    if unknown or not args.phases:
        parser.error(f"--phases takes {', '.join(PHASES)}; got {', '.join(unknown) or 'none'}")
    if [p for p in PHASES if p in args.phases] != args.phases:
        parser.error(f"--phases: give them in the order {', '.join(PHASES)}")
    if {"again", "second"} & set(args.phases) and "cold" not in args.phases:
        parser.error("--phases: again and second time what follows cold; add cold")
    args.revs = [r.strip() for r in args.revs.split(",") if r.strip()]
    if not args.revs:
        parser.error("--revs is empty")
    args.commits = [resolve(rev) for rev in args.revs]
    if args.t10k is not None and not (args.t10k / "t10k-images-idx3-ubyte.gz").is_file():
        raise UserError(f"--t10k {args.t10k}: no t10k-images-idx3-ubyte.gz there")
    return args


def default_t10k() -> Path | None:
    given = os.environ.get("HVT_MNIST_T10K_DIR")
    return Path(given) if given else None


def resolve(rev: str) -> str:
    found = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "--verify", "--quiet",
                            f"{rev}^{{commit}}"], capture_output=True, text=True)
    if found.returncode != 0:
        raise UserError(f"--revs: {rev} is no commit of {CHECKOUT}")
    return found.stdout.strip()


def phase_env(caches: Path, t10k: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CACHE_SETTINGS}
    env["XDG_CACHE_HOME"] = str(caches)
    if t10k is not None:
        env["HVT_MNIST_T10K_DIR"] = str(t10k.resolve())
    return env


def run_phase(command: list[str], clone: Path, env: dict, log: Path, timeout: float) -> dict:
    """One phase's command in its clone: wall time, the setup's own time
    (its last 'done in N s'), and the demo's final test accuracy."""
    started = time.perf_counter()
    with open(log, "w") as output:
        try:
            result = subprocess.run(command, cwd=clone, env=env, stdout=output,
                                    stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{shlex.join(command)} ran past {timeout:g} s (log: {log})") from None
    wall_s = time.perf_counter() - started
    text = log.read_text(errors="replace")
    if result.returncode != 0:
        lines = [line for line in text.splitlines() if line.strip()] or ["no output"]
        raise RunFailed(f"{shlex.join(command)}: exit {result.returncode}: {lines[-1].strip()} "
                        f"(log: {log})")
    setup = re.findall(r"setup\.sh: done in (\d+) s", text)
    summary = clone / "runs" / "demo" / "summary.json"
    accuracy = None
    if command == DEMO and summary.is_file():
        accuracy = json.loads(summary.read_text()).get("test_accuracy")
    return {"seconds": round(wall_s, 1), "setup_seconds": int(setup[-1]) if setup else None,
            "test_accuracy": accuracy}


def time_commit(args, commit: str, work: Path) -> dict:
    phases = {}
    caches = None
    for name in args.phases:
        clone_name, fresh, command = PHASES[name]
        if fresh:
            caches = Path(tempfile.mkdtemp(prefix="caches-", dir=work))
        clone = work / f"{commit[:10]}-{clone_name}"
        if not clone.exists():
            subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(CHECKOUT), str(clone)],
                           check=True, timeout=600)
            subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True,
                           timeout=600)
        print(f"{PROG}: {commit[:10]} {name}: {shlex.join(command)}", flush=True)
        record = run_phase(command, clone, phase_env(caches, args.t10k),
                           args.out_dir / f"{commit[:10]}-{name}.log", args.timeout)
        phases[name] = {"command": shlex.join(command), **record}
        print(f"{PROG}: {commit[:10]} {name}: {record['seconds']:.0f} s", flush=True)
    return phases


def table(revs: list[str], commits: list[str], results: dict) -> str:
    head = "| phase | " + " | ".join(f"{rev} ({commit[:7]})" for rev, commit in
                                      zip(revs, commits, strict=True)) + " |"
    lines = [head, "|---" * (len(commits) + 1) + "|"]
    base = results[commits[0]]
    for phase in PHASES:
        if phase not in base:
            continue
        cells = []
        for commit in commits:
            seconds = results[commit][phase]["seconds"]
            ratio = seconds / base[phase]["seconds"]
            cells.append(f"{seconds:.0f} s" + ("" if commit == commits[0] else f" ({ratio:.2f}x)"))
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def typed_command(args) -> str:
    """The command as typed, each folder given resolved and then named, so
    that no machine's paths travel with the record."""
    names = {path.resolve(): name for path, name in ((args.t10k, "T10K_DIR"),
                                                     (args.work_dir, "WORK_DIR")) if path}
    given = [str(Path(a).resolve()) if Path(a).exists() else a for a in sys.argv[1:]]
    return shlex.join([f"benchmarks/{PROG}.sh", *as_typed(given, names)])


def main() -> int:
    args = parse_args(sys.argv[1:])
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="setup-times-", dir=args.work_dir))
    except OSError as err:
        raise UserError(f"{err.filename}: {err.strerror or err}") from None
    from benchmarks.machine import machine_record  # after the checks: it asks git

    results = {}
    try:
        for commit in args.commits:
            results[commit] = time_commit(args, commit, work)
            for done in work.iterdir():  # its clones and caches: gigabytes each
                shutil.rmtree(done, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = table(args.revs, args.commits, results)
    atomic_write_json(args.out_dir / f"{PROG}.json", {
        "benchmark": PROG, "command": typed_command(args),
        "revs": dict(zip(args.revs, args.commits, strict=True)), "phases": args.phases,
        "t10k": args.t10k is not None, "results": results, "machine": machine_record()})
    atomic_write_bytes(args.out_dir / f"{PROG}.md", report.encode())
    print(report, end="", flush=True)
    return 0


def cli() -> None:
    """The command's entry (benchmarks/setup_times.sh runs this module)."""
    run_main(main, prog=PROG)


if __name__ == "__main__":
    cli()

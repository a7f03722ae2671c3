"""What one GPU node gives, in one command: the Horovod build, the GPUs'
allreduce against their link, our trainer against the loop that behaves
like Horovod's own MNIST example, ResNet-50 with Horovod against torchrun +
DDP, and the backward timeline the scaling predictor reads. Run it through
benchmarks/gpu_check.sh:

    benchmarks/gpu_check.sh
    benchmarks/gpu_check.sh --example ../horovod/examples/pytorch/pytorch_mnist.py
    benchmarks/gpu_check.sh --parts build,mnist --epochs 1 --out-dir runs/check

The parts, in order (GPU: needs a GPU, two for the allreduce):

    build      horovodrun --check-build: the frameworks, controllers and
               tensor operations of the installed Horovod (a node with GPUs
               and a build without NCCL fails here)
    allreduce  (GPU) benchmarks/allreduce_bench.py over all the GPUs,
               Horovod and torch.distributed's NCCL: bus bandwidth as
               nccl-tests defines it, beside what the GPUs' link should
               give (NVLink or PCIe, from nvidia-smi)
    mnist      our trainer (its defaults), benchmarks/upstream_mnist.py (the
               loop that behaves like Horovod's example) and, with
               --example, the example itself: the same digits, ranks and
               epochs; each one's wall time and final test accuracy. One
               rank per GPU, or --np ranks on the CPU
    resnet50   (GPU) ResNet-50 on synthetic images, Horovod against
               torchrun + DDP, on one GPU and on all (run_matrix.sh's runs)
    timeline   (GPU) ResNet-50's per-layer backward timeline
               (benchmarks/measure_timeline.py --cuda), which
               benchmarks/predict_scaling.py reads

Each part writes its JSON into --out-dir; gpu_check.json gathers the parts
with the machine, and the table, printed last, is also gpu_check.md. A part
that fails is one line in its row and the others still run (exit status
1); without a GPU the GPU parts are named as skipped.
"""

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import CHECKOUT, as_typed, venv_env
from horovod_train.core import options
from horovod_train.core.atomic import atomic_write_bytes, atomic_write_json
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main

PROG = "gpu_check"
PARTS = ("build", "allreduce", "mnist", "resnet50", "timeline")
GPU_PARTS = ("allreduce", "resnet50", "timeline")
TRAINER = CHECKOUT / "horovod_train" / "pytorch_mnist.py"
ALLREDUCE_SIZES = "1M,16M,256M"
# The example prints "Test set: Average loss: 0.5488, Accuracy: 89.55%".
EXAMPLE_ACCURACY = re.compile(r"Accuracy: ([\d.]+)%")


def parse_parts(text: str) -> tuple[str, ...]:
    parts = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in parts if part not in PARTS]
    if unknown or not parts:
        named = ",".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(f"{named}: choose from {', '.join(PARTS)}")
    return tuple(part for part in PARTS if part in parts)  # always in PARTS' order


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog="gpu_check.sh", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", type=parse_parts, default=PARTS,
                        help=f"comma-separated subset of {','.join(PARTS)} (default: all)")
    parser.add_argument("--out-dir", type=Path, default=Path("runs/gpu_check"),
                        help="where the JSON and the table go (default: runs/gpu_check)")
    parser.add_argument("--data-dir", type=Path, default=CHECKOUT / "data",
                        help="MNIST in the torchvision layout (MNIST/raw/), downloaded there "
                             "first when missing (default: data in the checkout)")
    parser.add_argument("--epochs", type=options.positive_int, default=3,
                        help="epochs of each MNIST run (default 3)")
    parser.add_argument("--np", type=options.positive_int, default=2,
                        help="ranks of the MNIST runs on a machine without a GPU (default 2; "
                             "with GPUs, one rank per GPU)")
    parser.add_argument("--example", type=Path, default=None, metavar="PATH",
                        help="Horovod's examples/pytorch/pytorch_mnist.py, run beside the two "
                             "others in the mnist part")
    parser.add_argument("--timeout", type=options.positive_float, default=600,
                        help="seconds each command of a part may run (default 600)")
    args = parser.parse_args(argv)
    if args.example is not None and not args.example.is_file():
        parser.error(f"--example {args.example}: no such file")
    if "mnist" not in args.parts and args.example is not None:
        parser.error("--example runs in the mnist part: add mnist to --parts")
    args.out_dir = args.out_dir.resolve()
    args.data_dir = args.data_dir.resolve()
    return args


# --- the node ------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    gpus: int
    gpu_name: str | None


def this_node() -> Node:
    import torch

    gpus = torch.cuda.device_count()
    return Node(gpus, torch.cuda.get_device_name(0) if gpus else None)


class Skipped(Exception):
    """A part this node cannot run; its message says why."""


def launcher() -> str:
    """horovodrun beside this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.exists() else "horovodrun"


def horovodrun(ranks: int) -> list[str]:
    return [launcher(), "-np", str(ranks), "-H", f"localhost:{ranks}"]


def run(command: list[str], log: Path, timeout: float) -> tuple[str, float]:
    """Run a part's command from the checkout, its output into `log`; its
    output and wall time, or RunFailed with its last error line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "w+") as output:
        try:
            result = subprocess.run(command, cwd=CHECKOUT, env=venv_env(), stdout=output,
                                    stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{shlex.join(as_typed(command[-4:], {}))} ran past {timeout:g} s "
                            f"(its output: {log})") from None
        output.seek(0)
        text = output.read()
    wall_s = time.perf_counter() - started
    if result.returncode != 0:
        lines = [line for line in text.splitlines() if line.strip()]
        errors = [line for line in lines if "error:" in line.lower()] or lines[-1:]
        detail = errors[-1].split("error: ", 1)[-1] if errors else "no output"
        raise RunFailed(f"exit {result.returncode}: {detail.strip()} (log: {log})")
    return text, wall_s


# --- the parts -----------------------------------------------------------------
# Each takes the settings, the node and its output directory, and returns the
# table's cell and the part's record (written as OUT/PART.json), or raises
# Skipped, UserError or RunFailed.

def parse_check_build(text: str) -> dict:
    """horovodrun --check-build's report: the version and what each section
    marks [X]."""
    version = re.search(r"Horovod v([\w.+-]+):", text)
    sections, current = {}, None
    for line in text.splitlines():
        heading = re.match(r"Available (.+):\s*$", line.strip())
        if heading:
            current = sections.setdefault(heading[1].lower().replace(" ", "_"), [])
        elif current is not None and line.strip().startswith("[X]"):
            current.append(line.strip()[3:].strip())
    return {"horovod": version[1] if version else None, **sections}


def build_part(args, node: Node, out: Path) -> tuple[str, dict]:
    text, _ = run([launcher(), "--check-build"], out / "build.log", args.timeout)
    record = parse_check_build(text)
    if record["horovod"] is None:
        raise RunFailed(f"horovodrun --check-build printed no report (log: {out / 'build.log'})")
    cell = (f"Horovod {record['horovod']}: {', '.join(record.get('frameworks', []))}; "
            f"controllers {', '.join(record.get('controllers', []))}; tensor operations "
            f"{', '.join(record.get('tensor_operations', []))}")
    if node.gpus and "NCCL" not in record.get("tensor_operations", []):
        raise RunFailed(f"{cell}: built without NCCL, so GPU tensors would be reduced "
                        "through host memory (scripts/setup.sh builds it with NCCL on a GPU "
                        "machine)")
    return cell, record


def allreduce_part(args, node: Node, out: Path) -> tuple[str, dict]:
    if node.gpus < 2:
        raise Skipped("one GPU: an allreduce on one GPU crosses no link" if node.gpus
                      else "no GPU")
    from benchmarks import gpu_link

    link = gpu_link.this_node()
    expected = link["expected_busbw_gbps"]
    bench = out / "allreduce_bench.json"
    command = [*horovodrun(node.gpus), sys.executable, "benchmarks/allreduce_bench.py",
               "--cuda", "--implementations", "horovod,torch", "--sizes", ALLREDUCE_SIZES,
               "--json", str(bench)]
    if expected:
        command += ["--link-gbit", f"{expected * 8:g}"]
    run(command, out / "allreduce.log", args.timeout)
    summary = json.loads(bench.read_text())["summary"]
    busbw = summary["busbw_gbps"]
    should = (f"{link['kind']} ({link['path']}) should give {expected:.0f} GB/s"
              if expected else f"{link['kind']} ({link['path']}): its rate unknown")
    figures = ", ".join(
        f"{'torch NCCL' if name == 'torch' else 'Horovod'} {value:.0f} GB/s"
        + (f" ({value / expected:.0%})" if expected else "") for name, value in busbw.items())
    cell = f"{node.gpus} GPUs, busbw at {summary['bytes'] >> 20} MiB: {figures}; {should}"
    return cell, {"link": link, "gpus": node.gpus, "summary": summary,
                  "percent_of_link": {name: value / expected for name, value in busbw.items()}
                  if expected else None, "bench_json": bench.name}


def mnist_commands(args, node: Node, ranks: int, out: Path) -> dict[str, list[str]]:
    cpu = [] if node.gpus else ["--no-cuda"]
    common = ["--data-dir", str(args.data_dir), "--epochs", str(args.epochs), *cpu]
    commands = {
        "ours": [*horovodrun(ranks), sys.executable, str(TRAINER), *common, "--no-download",
                 "--no-progress", "--log-dir", str(out / "mnist" / "ours")],
        "reference": [*horovodrun(ranks), sys.executable, "benchmarks/upstream_mnist.py",
                      *common, "--json", str(out / "mnist" / "reference.json")],
    }
    if args.example:
        commands["example"] = [*horovodrun(ranks), sys.executable, str(args.example.resolve()),
                               *common]
    return commands


def path_names(args) -> dict[Path, str]:
    """The run's own paths by name in its records (benchmarks.as_typed)."""
    names = {args.out_dir: "OUT", args.data_dir: "DATA_DIR"}
    return {**names, args.example.resolve(): "EXAMPLE"} if args.example else names


def side_accuracy(side: str, output: str, out: Path) -> float:
    """The final test accuracy of one side, from its own record or output."""
    if side == "ours":
        return json.loads((out / "mnist" / "ours" / "summary.json").read_text())[
            "test_accuracy"]
    if side == "reference":
        return json.loads((out / "mnist" / "reference.json").read_text())["test_accuracy"]
    found = EXAMPLE_ACCURACY.findall(output)
    if not found:
        raise RunFailed(f"the example printed no test accuracy (log: {out / 'mnist'})")
    return float(found[-1]) / 100


SIDE_NAMES = {"ours": "ours", "reference": "the example's loop", "example": "the example"}


def mnist_part(args, node: Node, out: Path) -> tuple[str, dict]:
    from horovod_train.core import mnist

    # Once, before any run: the runs themselves never download.
    mnist.ensure_available(args.data_dir, ["train", "test"])
    ranks = node.gpus or args.np
    sides = {}
    for side, command in mnist_commands(args, node, ranks, out).items():
        output, wall_s = run(command, out / "mnist" / f"{side}.log", args.timeout)
        typed = as_typed(command, path_names(args))
        sides[side] = {"command": shlex.join(typed), "wall_s": wall_s,
                       "test_accuracy": side_accuracy(side, output, out)}
    # The digits' counts as the reference read them, not read here again.
    reference = json.loads((out / "mnist" / "reference.json").read_text())
    train, test = reference["train_samples"], reference["test_samples"]
    where = f"{ranks} GPUs" if node.gpus else f"{ranks} ranks on the CPU"
    figures = "; ".join(f"{SIDE_NAMES[side]} {s['test_accuracy']:.2%} in {s['wall_s']:.1f} s"
                        for side, s in sides.items())
    cell = f"{where}, {train}/{test} digits, {args.epochs} epochs: {figures}"
    return cell, {"ranks": ranks, "device": "cuda" if node.gpus else "cpu",
                  "epochs": args.epochs, "train_samples": train, "test_samples": test,
                  "sides": sides}


def resnet50_part(args, node: Node, out: Path) -> tuple[str, dict]:
    if not node.gpus:
        raise Skipped("no GPU")
    layouts = "1x1" if node.gpus == 1 else f"1x1,1x{node.gpus}"
    matrix_dir = out / "resnet50"
    run([sys.executable, "-m", "benchmarks.matrix", "--hosts", "localhost", "--layouts", layouts,
         "--workload", "synthetic", "--model", "resnet50", "--steps", "30", "--repeats", "2",
         "--timeout", str(args.timeout), "--out-dir", str(matrix_dir)],
        out / "resnet50.log", args.timeout * 4 + 60)
    rows = json.loads((matrix_dir / "results.json").read_text())["rows"]
    cells = []
    for layout in layouts.split(","):
        mine = {row["launcher"]: row for row in rows if row["layout"] == layout}
        figures = ", ".join(
            f"{'Horovod' if name == 'horovod' else 'DDP'} "
            + (f"{row['images_per_sec']:.0f} img/s" if row["status"] == "ok"
               else f"failed: {row['reason']}")
            + (f" ({row['efficiency']:.0%} of linear)" if row["status"] == "ok"
               and row["ranks"] > 1 and row.get("efficiency") else "")
            for name, row in mine.items())
        cells.append(f"{layout}: {figures}")
    return "; ".join(cells), {"layouts": layouts, "rows": rows,
                              "matrix_dir": matrix_dir.name}


def timeline_part(args, node: Node, out: Path) -> tuple[str, dict]:
    if not node.gpus:
        raise Skipped("no GPU")
    path = out / "timeline.json"
    run([sys.executable, "benchmarks/measure_timeline.py", "--model", "resnet50",
         "--batch-size", "64", "--steps", "5", "--cuda", "--json", str(path)],
        out / "timeline.log", args.timeout)
    record = json.loads(path.read_text())
    shares = record["shares"]
    cell = (f"{record['tensors']} gradients, {record['gradient_bytes'] / 1e6:.0f} MB; step "
            f"{record['measured_step_s'] * 1e3:.0f} ms at batch 64, forward/backward/"
            f"optimizer {shares['forward']:.2f}/{shares['backward']:.2f}/"
            f"{shares['optimizer']:.2f}")
    return cell, record


RUNNERS = {"build": build_part, "allreduce": allreduce_part, "mnist": mnist_part,
           "resnet50": resnet50_part, "timeline": timeline_part}


# --- the report ----------------------------------------------------------------

def table(parts: dict) -> str:
    lines = ["| part | status | result |", "|---|---|---|"]
    lines += [f"| {name} | {part['status']} | {part['summary'].replace('|', '/')} |"
              for name, part in parts.items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    args = parse_args(sys.argv[1:])
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out-dir {args.out_dir}: {err.strerror or err}") from None
    from benchmarks.machine import machine_record  # after the checks: it asks git

    node = this_node()
    print(f"{PROG}: {node.gpus} GPU(s){f' ({node.gpu_name})' if node.gpu_name else ''}; "
          f"parts {', '.join(args.parts)}; output in {args.out_dir}", flush=True)
    parts = {}
    for name in args.parts:
        started = time.perf_counter()
        try:
            summary, record = RUNNERS[name](args, node, args.out_dir)
            status = "ok"
            atomic_write_json(args.out_dir / f"{name}.json", {**record,
                                                                "machine": machine_record()})
        except Skipped as why:
            status, summary = "skipped", str(why)
        except (RunFailed, UserError) as err:
            status, summary = "failed", str(err)
        parts[name] = {"status": status, "summary": summary,
                       "seconds": round(time.perf_counter() - started, 1),
                       "json": f"{name}.json" if status == "ok" else None}
        print(f"{PROG}: {name}: {status}: {summary}", flush=True)
    report = table(parts)
    atomic_write_json(args.out_dir / "gpu_check.json", {
        "benchmark": "gpu_check", "gpus": node.gpus, "gpu_name": node.gpu_name,
        # As typed, with the run's own paths (given relative or not) by name.
        "command": shlex.join(["benchmarks/gpu_check.sh", *as_typed(
            [str(Path(a).resolve()) if Path(a).exists() else a for a in sys.argv[1:]],
            path_names(args))]),
        "parts": parts, "skipped": [n for n, p in parts.items() if p["status"] == "skipped"],
        "machine": machine_record()})
    atomic_write_bytes(args.out_dir / "gpu_check.md", report.encode())
    print(report, end="", flush=True)
    failed = [name for name, part in parts.items() if part["status"] == "failed"]
    if failed:
        print(f"{PROG}: failed: {', '.join(failed)} (each one's reason is in its row)",
              file=sys.stderr, flush=True)
    return 1 if failed else 0


def cli() -> None:
    """The command's entry (benchmarks/gpu_check.sh runs this module)."""
    run_main(main, prog=PROG)


if __name__ == "__main__":
    cli()

"""The timeline model (benchmarks/timeline_model.py, through
benchmarks/predict_scaling.py --timeline) beside runs measured on the
emulated hosts: each results.json of benchmarks/run_matrix.sh --emulate
has its multi-rank layouts predicted from its own 1x1 run and the model's
committed timeline, nothing fitted to the runs.

    python benchmarks/predict_emulated.py RUN_DIR... --json comparison.json

The links come from what run_matrix.sh recorded of the shaping (rate, one-way
delay) and from the allreduce bandwidth and small-message time that
benchmarks/allreduce_bench.py measured between the emulated hosts (files
under benchmarks/results/cpu-2core-1gbit/allreduce/ and
cpu-2core-allreduce-by-rate/), for the controller the run used, at the run's
rate where it was measured, else at 1 Gbit/s: the share of the shaped rate an
allreduce reaches, and the cost of one small allreduce (negotiation, the
transport's start-up, the cycle).
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks import predict_scaling
from horovod_train.core.errors import ArgumentParser, UserError, run_main

PROG = "predict_emulated"
HERE = Path(__file__).resolve().parent
TIMELINES = HERE / "timelines"
ALLREDUCE = HERE / "results" / "cpu-2core-1gbit" / "allreduce"
BY_RATE = HERE / "results" / "cpu-2core-allreduce-by-rate"
# Two ranks of one emulated host reach each other over loopback TCP; no
# measurement of it here, and the ring's slowest link is the shaped one.
LOOPBACK_GBIT = 10.0
SMALL_BYTES = 65536


def measured_transport(controller: str, link_gbit: float) -> dict:
    """Median over the committed allreduce_bench runs of this controller at
    this link rate (at 1 Gbit/s where the rate has none): Horovod's bus
    bandwidth at the largest size as a share of the link it was shaped to,
    and its time for a 64 KiB allreduce."""
    by_rate: dict[float, list[tuple[Path, dict]]] = {}
    for folder in (ALLREDUCE, BY_RATE):
        for path in sorted(folder.glob(f"{controller}-*.json")):
            data = json.loads(path.read_text())
            by_rate.setdefault(float(data["settings"]["link_gbit"]), []).append((path, data))
    measured_at = link_gbit if link_gbit in by_rate else 1.0
    if measured_at not in by_rate:
        raise UserError(f"no allreduce measurement for controller {controller} in {ALLREDUCE}")
    shares, small = [], []
    for _, data in by_rate[measured_at]:
        sizes = {r["bytes"]: r for r in data["results"]["horovod"]}
        largest = sizes[max(sizes)]
        shares.append(largest["busbw_gbps"] * 8 / data["settings"]["link_gbit"])
        small.append(sizes[SMALL_BYTES]["time_s"])
    return {"bandwidth_share": statistics.median(shares),
            "small_allreduce_s": statistics.median(small), "measured_at_gbit": measured_at,
            "files": [str(p.relative_to(HERE.parent)) for p, _ in by_rate[measured_at]]}


def rate_gbit(text: str) -> float:
    for suffix, scale in (("gbit", 1.0), ("mbit", 1e-3)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    raise UserError(f"link rate {text!r}: not NNgbit or NNmbit")


def delay_us(text: str | None) -> float:
    if not text:
        return 0.0
    for suffix, scale in (("ms", 1e3), ("us", 1.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    raise UserError(f"link delay {text!r}: not NNms or NNus")


def timeline_for(settings: dict) -> Path:
    if settings["model"] == "mnist_cnn":
        return TIMELINES / "mnist_cnn.json"
    return TIMELINES / f"{settings['model']}-{settings['image_size']}px.json"


def predict_run(run_dir: Path) -> dict:
    path = run_dir / "results.json"
    data = predict_scaling.load_results(path)
    settings = data["settings"]
    network = settings.get("network") or {}
    if not settings.get("emulate") or not network.get("rate"):
        raise UserError(f"{path}: not a run on the emulated hosts with a shaped link")
    by_controller: dict[str, set] = {}
    for r in data["runs"]:
        if r.get("launcher") == "horovod" and r.get("ranks", 1) > 1 and r.get("controller"):
            by_controller.setdefault(r["controller"], set()).add(
                (r["nodes"], r["ranks_per_node"]))
    if not by_controller:
        raise UserError(f"{path}: no multi-rank Horovod run with its controller recorded")
    one_way_us = delay_us(network.get("delay"))
    rows, commands, transports = [], [], {}
    for controller, layouts in sorted(by_controller.items()):
        rate = rate_gbit(network["rate"])
        transport = transports[controller] = measured_transport(controller, rate)
        gbit = rate * transport["bandwidth_share"]
        argv = [str(path), "--timeline", str(timeline_for(settings)),
                "--layouts", ",".join(f"{n}x{g}" for n, g in [(1, 1), *sorted(layouts)]),
                "--inter-gbit", f"{gbit:.4g}", "--inter-latency-us", f"{one_way_us:g}",
                "--intra-gbit", f"{LOOPBACK_GBIT:g}", "--intra-latency-us", "0",
                "--op-latency-us", f"{transport['small_allreduce_s'] * 1e6:.0f}",
                "--fusion-mb", f"{settings.get('fusion_threshold_mb') or 4:g}",
                "--cycle-ms", f"{settings.get('cycle_time_ms') or 1:g}"]
        report = predict_scaling.build_report(predict_scaling.parse_args(argv))
        one = next(r for r in report["rows"] if r["ranks"] == 1)
        for row in report["rows"]:
            if row["ranks"] == 1:
                continue
            measured = row.get("measured_images_per_sec")
            rows.append({"layout": row["layout"], "ranks": row["ranks"],
                         "controller": controller,
                         "predicted_images_per_sec": row["images_per_sec"],
                         "measured_images_per_sec": measured,
                         "predicted_over_measured": (row["images_per_sec"] / measured
                                                     if measured else None),
                         "no_overlap_images_per_sec": row["images_per_sec_no_overlap"],
                         "no_overlap_over_measured": (row["images_per_sec_no_overlap"]
                                                      / measured if measured else None),
                         "exposed_ms": row["exposed_comm_s"] * 1e3,
                         "oversubscribed": "oversubscribed" in row["note"]})
        commands.append("benchmarks/predict_scaling.py " + " ".join(
            a.replace(str(HERE.parent) + "/", "") for a in argv))
    rows.sort(key=lambda r: (r["ranks"], r["layout"]))
    try:
        shown = str(path.resolve().relative_to(HERE.parent))
    except ValueError:  # a run outside the checkout
        shown = str(path)
    return {"run": shown, "model": settings["model"], "rate": network["rate"],
            "delay": network.get("delay") or "0ms", "transport": transports,
            "one_rank_images_per_sec": one["measured_images_per_sec"],
            "layouts": rows, "commands": commands}


def markdown(runs: list[dict]) -> str:
    lines = ["| run | model | link | controller | 1x1 images/s | layout | predicted images/s "
             "| measured | predicted / measured | exposed allreduce ms "
             "| no-overlap bound / measured |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        for row in run["layouts"]:
            ratio = row["predicted_over_measured"]
            mark = " (oversubscribed)" if row["oversubscribed"] else ""
            lines.append(
                f"| {Path(run['run']).parent.name} | {run['model']} | {run['rate']}, "
                f"{run['delay']} | {row['controller']} "
                f"| {run['one_rank_images_per_sec']:.1f} | {row['layout']}{mark} "
                f"| {row['predicted_images_per_sec']:.1f} "
                f"| {'–' if row['measured_images_per_sec'] is None else format(row['measured_images_per_sec'], '.1f')} "  # noqa: E501
                f"| {'–' if ratio is None else format(ratio, '.2f')} | {row['exposed_ms']:.1f} "
                f"| {'–' if ratio is None else format(row['no_overlap_over_measured'], '.2f')} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR",
                        help="directories holding a results.json of run_matrix.sh --emulate")
    parser.add_argument("--json", type=Path, metavar="FILE")
    parser.add_argument("--markdown", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    predict_scaling.check_output_dirs(parser, args)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    runs = [predict_run(run_dir) for run_dir in args.runs]
    predict_scaling.write_outputs(args, markdown(runs), {"schema_version": 1, "runs": runs})
    return 0


def cli() -> None:
    run_main(lambda: main(sys.argv[1:]), prog=PROG)


if __name__ == "__main__":
    cli()

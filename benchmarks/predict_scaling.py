#!/usr/bin/env python3
"""Predict throughput and scaling efficiency for layouts larger than the ones
measured, from a results.json written by benchmarks/run_matrix.sh, or for a
layout described on the command line.

From a results.json, the ring allreduce model (benchmarks/ring_model.py)
takes the 1x1 step as the compute time and the links given (--inter-gbit,
--inter-latency-us, --intra-gbit, --intra-latency-us) or fitted from the
measured layouts that were not oversubscribed, and predicts each layout
beside what was measured. --validate OTHER.json predicts OTHER's measured
layouts with the links fitted here.

Without a results.json, a layout can be described instead: one GPU's
images/s at its batch (--images-per-sec, --batch-size), the gradients'
size (--gradient-mb) and the links (--inter-gbit, and --intra-gbit for
layouts of one node). The links are then raw, so each layout gets two
bounds (benchmarks/ring_model.py): no overlap and full overlap.

--timeline FILE (benchmarks/measure_timeline.py) gives a point estimate
instead, from either input: the timeline model (benchmarks/timeline_model.py)
replays Horovod's loop (--fusion-mb, --cycle-ms, --op-latency-us,
--algorithm) against when each gradient is ready, with the links as given,
nothing fitted, and keeps the two bounds beside the estimate.
"""

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks import ring_model, timeline_model
from benchmarks.machine import machine_record
from horovod_train.core.atomic import atomic_write_bytes, atomic_write_json
from horovod_train.core.errors import ArgumentParser, UserError, read_json, run_main
from horovod_train.core.options import non_negative_float, positive_float

PROG = "predict_scaling"
DEFAULT_LAYOUTS = "1x1,1x2,2x2,2x4,4x8,16x8"
SCHEMA_VERSION = 1


# ---- input ------------------------------------------------------------------

def parse_layouts(text: str) -> list[tuple[int, int]]:
    layouts = []
    for item in text.split(","):
        nodes, sep, per_node = item.strip().partition("x")
        if not (sep and nodes.isdigit() and per_node.isdigit()) or min(
                int(nodes), int(per_node)) < 1:
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} is not a layout NxG (nodes x ranks per node, both >= 1)")
        layouts.append((int(nodes), int(per_node)))
    return layouts


def load_results(path: Path) -> dict:
    """The parts of a results.json the model needs, checked."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"{path}: not a results.json of benchmarks/run_matrix.sh "
                        f"(schema_version {SCHEMA_VERSION})")
    settings = data.get("settings") or {}
    for key in ("batch_per_rank", "gradient_bytes"):
        if not isinstance(settings.get(key), int) or settings[key] <= 0:
            raise UserError(f"{path}: settings.{key} is missing or not a positive integer")
    runs = data.get("runs")
    if not isinstance(runs, list):
        raise UserError(f"{path}: no list of runs")
    return data


def median_steps(data: dict, launcher: str) -> dict[tuple[int, int], dict]:
    """Per layout: the median step time over the repeats that succeeded
    (from images/s, so it is the step of the whole job), and whether it was
    oversubscribed."""
    batch = data["settings"]["batch_per_rank"]
    steps: dict[tuple[int, int], list[float]] = {}
    oversubscribed: dict[tuple[int, int], bool] = {}
    for run in data["runs"]:
        if run.get("launcher") != launcher or run.get("status") != "ok":
            continue
        rate = run.get("images_per_sec")
        if not isinstance(rate, (int, float)) or rate <= 0:
            continue
        layout = (run["nodes"], run["ranks_per_node"])
        steps.setdefault(layout, []).append(run["ranks"] * batch / rate)
        oversubscribed[layout] = oversubscribed.get(layout, False) or bool(
            run.get("oversubscribed"))
    return {layout: {"step_s": statistics.median(values), "repeats": len(values),
                     "oversubscribed": oversubscribed[layout]}
            for layout, values in steps.items()}


# ---- predictions ------------------------------------------------------------

def predict(layout: tuple[int, int], compute_s: float, batch: int, gradient_bytes: float,
            link_by_name: dict[str, dict | None], timeline: dict | None = None,
            net: dict | None = None) -> dict:
    """A layout's row of the report, its columns filled by the timeline
    model when a timeline is given, else by the ring model."""
    nodes, per_node = layout
    ranks = nodes * per_node
    row = {"layout": f"{nodes}x{per_node}", "nodes": nodes, "ranks_per_node": per_node,
           "ranks": ranks, "link": None, "step_time_s": None, "comm_time_s": None,
           "images_per_sec": None, "images_per_sec_per_rank": None, "efficiency": None,
           "images_per_sec_full_overlap": None, "efficiency_full_overlap": None,
           "note": ""}
    if timeline is not None:
        return timeline_model.predict_timeline(row, compute_s, batch, link_by_name,
                                               timeline, net)
    return ring_model.predict_ring(row, compute_s, batch, gradient_bytes, link_by_name)


def with_measured(row: dict, measured: dict, batch: int, fitted_from: set) -> dict:
    """A predicted row beside what its layout measured, if it did."""
    layout = (row["nodes"], row["ranks_per_node"])
    m = measured.get(layout)
    row["measured_images_per_sec"] = None
    row["error"] = None
    if m is None:
        return row
    row["measured_images_per_sec"] = row["ranks"] * batch / m["step_s"]
    if row["images_per_sec"] is not None:
        error = row["images_per_sec"] / row["measured_images_per_sec"] - 1
        row["error"] = 0.0 if abs(error) < 5e-3 else error  # no "-0%"
    marks = []
    if layout == (1, 1):
        marks.append("the compute time")
    elif m["oversubscribed"]:
        marks.append("measured oversubscribed: not used")
    elif layout in fitted_from:
        marks.append("fitted to this row")
    row["note"] = "; ".join(filter(None, [row["note"], *marks]))
    return row


def model_inputs(data: dict, args: argparse.Namespace,
                 fit: bool = True) -> tuple[float, dict, dict]:
    """From a results.json: the compute time (its 1x1 step), the measured
    steps, and the links (fitted to those steps when fit, else given only)."""
    measured = median_steps(data, args.launcher)
    if (1, 1) not in measured:
        raise UserError(f"{args.results}: no successful 1x1 run of launcher "
                        f"{args.launcher}: the model needs it for the compute time")
    compute_s = measured[(1, 1)]["step_s"]
    gradient_bytes = data["settings"]["gradient_bytes"]
    return compute_s, measured, ring_model.links(measured if fit else {}, compute_s,
                                                 gradient_bytes, args)


def validate(other: dict, args: argparse.Namespace, link_by_name: dict) -> list[dict]:
    """The ring model on another results.json, not fitted to it: each of its
    multi-rank layouts not oversubscribed, predicted from its own 1x1 and
    gradients with the links fitted here."""
    measured = median_steps(other, args.launcher)
    if (1, 1) not in measured:
        raise UserError(f"{args.validate}: no successful 1x1 run of launcher {args.launcher}")
    compute_s = measured[(1, 1)]["step_s"]
    batch = other["settings"]["batch_per_rank"]
    rows = []
    for layout in sorted(measured):
        if layout == (1, 1) or measured[layout]["oversubscribed"]:
            continue
        row = predict(layout, compute_s, batch, other["settings"]["gradient_bytes"],
                      link_by_name)
        rows.append(with_measured(row, measured, batch, set()))
    if not rows:
        raise UserError(f"{args.validate}: no multi-rank layout that was not oversubscribed")
    return rows


# ---- output -----------------------------------------------------------------

def describe_link(name: str, link: dict | None) -> str:
    if link is None:
        return f"{name}-node link: unknown"
    gbit = link["bytes_per_s"] * 8 / 1e9
    if link.get("per_gpu"):
        return (f"{name}-node link: {gbit:.3g} Gbit/s per GPU (one NIC each), latency "
                f"{link['latency_s'] * 1e6:.3g} us; {link['source']}")
    return (f"{name}-node link: {gbit:.3g} Gbit/s, latency {link['latency_s'] * 1e6:.3g} us"
            f"; {link['source']}")


def table(rows: list[dict]) -> list[str]:
    def fmt(value, spec: str, scale: float = 1.0) -> str:
        return "–" if value is None else format(value * scale, spec)

    lines = ["| layout | ranks | predicted images/s | per rank | efficiency "
             "| full overlap: images/s | efficiency | modelled allreduce ms "
             "| measured images/s | prediction error | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['layout']} | {r['ranks']} | {fmt(r['images_per_sec'], '.1f')} "
            f"| {fmt(r['images_per_sec_per_rank'], '.1f')} | {fmt(r['efficiency'], '.0%')} "
            f"| {fmt(r['images_per_sec_full_overlap'], '.1f')} "
            f"| {fmt(r['efficiency_full_overlap'], '.0%')} "
            f"| {fmt(r['comm_time_s'], '.1f', 1e3)} "
            f"| {fmt(r.get('measured_images_per_sec'), '.1f')} | {fmt(r.get('error'), '+.0%')} "
            f"| {r['note']} |")
    return lines


def timeline_table(rows: list[dict]) -> list[str]:
    def fmt(value, spec: str, scale: float = 1.0) -> str:
        return "–" if value is None else format(value * scale, spec)

    lines = ["| layout | ranks | predicted images/s | per rank | efficiency "
             "| allreduce exposed ms | allreduces ms (count) | bounds: no overlap "
             "| full overlap | measured images/s | prediction error | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        count = "" if r.get("allreduces") is None else f" ({r['allreduces']})"
        lines.append(
            f"| {r['layout']} | {r['ranks']} | {fmt(r['images_per_sec'], '.1f')} "
            f"| {fmt(r['images_per_sec_per_rank'], '.1f')} | {fmt(r['efficiency'], '.1%')} "
            f"| {fmt(r.get('exposed_comm_s'), '.1f', 1e3)} "
            f"| {fmt(r['comm_time_s'], '.1f', 1e3)}{count} "
            f"| {fmt(r.get('efficiency_no_overlap'), '.0%')} "
            f"| {fmt(r['efficiency_full_overlap'], '.0%')} "
            f"| {fmt(r.get('measured_images_per_sec'), '.1f')} | {fmt(r.get('error'), '+.0%')} "
            f"| {r['note']} |")
    return lines


def markdown(report: dict) -> str:
    s = report["source"]
    fp16 = ", --fp16 (gradients halved)" if report["fp16"] else ""
    if report["results"] is None:
        head = (f"Predicted scaling of a described layout: one GPU at "
                f"{s['images_per_sec']:g} images/s, batch {s['batch_per_rank']} per rank, "
                f"{report['gradient_bytes'] / 1e6:.1f} MB of gradients{fp16}; no measured run")
        compute = f"- compute: {report['compute_s'] * 1e3:.1f} ms per step (batch / images/s)"
    else:
        head = (f"Predicted scaling of {s['model']} ({s['workload']}), batch "
                f"{s['batch_per_rank']} per rank, {report['gradient_bytes'] / 1e6:.1f} MB of "
                f"gradients{fp16}, launcher {report['launcher']}; from `{report['results']}`")
        compute = f"- compute: {report['compute_s'] * 1e3:.1f} ms per step (median 1x1)"
    timeline = report.get("timeline")
    if timeline is None:
        model_line = ("Model: step = compute + 2(P-1)·alpha + 2(P-1)/P · S / B (ring "
                      "allreduce over P ranks; the slowest link: between nodes when N > 1); "
                      "full overlap: step = the longer of compute and allreduce")
        rows = table(report["rows"])
    else:
        shares, settings = timeline["shares"], timeline["settings"]
        model_line = (
            f"Model: the timeline `{timeline['file']}` ({timeline['model']}, measured on "
            f"{timeline['measured_on']}: forward {shares['forward']:.0%}, backward "
            f"{shares['backward']:.0%}, optimizer {shares['optimizer']:.0%} of a step) "
            f"scaled to the one-GPU step; Horovod's loop replayed with fusion "
            f"{settings['fusion_mb']:g} MB, cycle {settings['cycle_ms']:g} ms, "
            f"{settings['op_latency_us']:g} us per allreduce, {settings['algorithm']} "
            "between nodes; bounds: no overlap (all gradients ready at the backward's end), "
            "full overlap")
        rows = timeline_table(report["rows"])
    lines = [
        head,
        "",
        model_line,
        "",
        compute,
        f"- {describe_link('inter', report['links']['inter'])}",
        f"- {describe_link('intra', report['links']['intra'])}",
        "",
        *rows,
    ]
    if report.get("validation"):
        v = report["validation"]
        lines += ["", f"Validation against `{v['results']}` (not used in the fit; its own 1x1 "
                  f"and {v['gradient_bytes'] / 1e6:.1f} MB of gradients):", "",
                  *table(v["rows"])]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="?", default=None,
                        help="results.json from benchmarks/run_matrix.sh; or describe the "
                             "layout with the options below")
    parser.add_argument("--layouts", type=parse_layouts, default=parse_layouts(DEFAULT_LAYOUTS),
                        help=f"layouts NxG to predict (default {DEFAULT_LAYOUTS})")
    parser.add_argument("--launcher", choices=["horovod", "ddp"], default="horovod",
                        help="whose runs to model (default horovod)")
    parser.add_argument("--inter-gbit", type=positive_float, metavar="GBIT",
                        help="bandwidth between nodes in Gbit/s (default: fitted)")
    parser.add_argument("--inter-latency-us", type=non_negative_float, metavar="US",
                        help="latency between nodes in microseconds (default: fitted, or 0 "
                             "when only one rank count was measured)")
    parser.add_argument("--intra-gbit", type=positive_float, metavar="GBIT",
                        help="bandwidth inside a node in Gbit/s (default: fitted from 1xG)")
    parser.add_argument("--intra-latency-us", type=non_negative_float, metavar="US",
                        help="latency inside a node in microseconds")
    parser.add_argument("--fp16", action="store_true",
                        help="predict with gradients halved, as --fp16-allreduce sends them")
    timed = parser.add_argument_group(
        "the timeline model", "a point estimate from when each gradient is ready; the links "
                              "are then given, never fitted")
    timed.add_argument("--timeline", type=Path, metavar="FILE",
                       help="the model's backward timeline (benchmarks/measure_timeline.py, "
                            "committed under benchmarks/timelines/)")
    timed.add_argument("--fusion-mb", type=non_negative_float, default=64.0, metavar="MB",
                       help="Horovod's fusion threshold, HOROVOD_FUSION_THRESHOLD in MB "
                            "(default 64, Horovod's own; 0: every tensor alone)")
    timed.add_argument("--cycle-ms", type=non_negative_float, default=1.0, metavar="MS",
                       help="Horovod's cycle time, HOROVOD_CYCLE_TIME (default 1; 0 for a "
                            "reducer that starts a bucket as soon as it is full, as DDP's)")
    timed.add_argument("--op-latency-us", type=non_negative_float, default=8.4, metavar="US",
                       help="the fixed cost of one allreduce: negotiation and the "
                            "transport's start-up (default 8.4, NCCL's base latency of a "
                            "ring allreduce in its tuning model)")
    timed.add_argument("--algorithm", choices=["ring", "hierarchical"], default="ring",
                       help="between nodes: one ring over all ranks (NCCL's), or "
                            "HOROVOD_HIERARCHICAL_ALLREDUCE's ring inside, ring between")
    parser.add_argument("--validate", type=Path, metavar="OTHER_RESULTS",
                        help="another results.json whose multi-rank layouts are predicted "
                             "with the links fitted here and compared with what it measured")
    described = parser.add_argument_group(
        "a described layout", "instead of a results.json: what one GPU does alone, and the "
                              "links (raw, so the prediction has a no-overlap and a "
                              "full-overlap bound)")
    described.add_argument("--images-per-sec", type=positive_float, metavar="X",
                           help="one GPU's training images/s at --batch-size")
    described.add_argument("--batch-size", type=int, metavar="B", help="images per GPU per step")
    described.add_argument("--gradient-mb", type=positive_float, metavar="MB",
                           help="gradient bytes each rank allreduces per step, in MB (4 x "
                                "parameters for fp32 gradients)")
    parser.add_argument("--inter-gbit-per-gpu", type=positive_float, metavar="GBIT",
                        help="instead of --inter-gbit: one NIC of this rate per GPU, so a "
                             "node of G ranks sends at G x GBIT")
    parser.add_argument("--matrix-dir", type=Path, metavar="DIR",
                        help="also write the predicted layouts as benchmarks/run_matrix.sh "
                             "writes a measured matrix (results.json, scaling.csv, scaling.md), "
                             "marked as predicted")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the report as JSON here")
    args = parser.parse_args(argv)
    if args.inter_gbit_per_gpu is not None:
        if args.inter_gbit is not None:
            parser.error("--inter-gbit-per-gpu and --inter-gbit both give the link between "
                         "nodes: give one")
        if args.timeline is None:
            parser.error("--inter-gbit-per-gpu needs the timeline model (--timeline)")
    if args.timeline is not None and args.gradient_mb is not None:
        parser.error("--gradient-mb: the timeline gives the gradients' sizes; drop one")
    if args.timeline is not None and args.validate is not None:
        parser.error("--validate checks links fitted to a results.json; the timeline model "
                     "fits nothing: predict the other results.json with --timeline instead")
    layout_options = ("images_per_sec", "batch_size") + (
        () if args.timeline is not None else ("gradient_mb",))
    described = [f"--{name.replace('_', '-')}" for name in layout_options
                 if getattr(args, name) is not None]
    if args.results is not None and described:
        parser.error(f"{', '.join(described)} describe a layout instead of a results.json: "
                     "give one or the other")
    if args.results is None:
        missing = [f"--{name.replace('_', '-')}" for name in layout_options
                   if getattr(args, name) is None]
        if missing:
            parser.error(f"give a results.json, or describe the layout: {', '.join(missing)} "
                         "missing")
        if args.batch_size < 1:
            parser.error("--batch-size must be at least 1")
        if args.validate is not None:
            parser.error("--validate compares with the links fitted to a results.json: give one")
        for name, where, wanted in (("inter", "across nodes", lambda n, g: n > 1),
                                    ("intra", "inside a node", lambda n, g: n == 1 and g > 1)):
            given = getattr(args, f"{name}_gbit") is not None or (
                name == "inter" and args.inter_gbit_per_gpu is not None)
            if not given and any(wanted(*lay)
                                                             for lay in args.layouts):
                parser.error(f"a described layout needs its links: give --{name}-gbit "
                             f"(layouts {where})")
    check_output_dirs(parser, args, ("markdown", "json", "matrix_dir"))
    return args


def check_output_dirs(parser: argparse.ArgumentParser, args: argparse.Namespace,
                      options: tuple[str, ...] = ("markdown", "json")) -> None:
    """A usage error for an output whose directory does not exist, before
    any work (the predictors' commands share it)."""
    for option in options:
        path = getattr(args, option)
        if path is not None and not path.resolve().parent.is_dir():
            parser.error(f"--{option.replace('_', '-')}: directory {path.resolve().parent} "
                         "does not exist")


def network(args: argparse.Namespace) -> dict:
    """Horovod's settings and the allreduce's algorithm, for the timeline model."""
    return {"fusion_bytes": args.fusion_mb * 1e6, "cycle_s": args.cycle_ms * 1e-3,
            "op_latency_s": args.op_latency_us * 1e-6, "algorithm": args.algorithm,
            "fp16": args.fp16}


def timeline_record(args: argparse.Namespace, timeline: dict | None) -> dict | None:
    if timeline is None:
        return None
    return {"file": str(args.timeline), "model": timeline.get("model"),
            "measured_on": timeline.get("device"), "shares": timeline["shares"],
            "gradient_bytes": sum(nbytes for _, nbytes in timeline["gradients"]),
            "settings": {"fusion_mb": args.fusion_mb, "cycle_ms": args.cycle_ms,
                         "op_latency_us": args.op_latency_us, "algorithm": args.algorithm}}


def described_report(args: argparse.Namespace) -> dict:
    """The report of a layout described on the command line: compute from
    one GPU's images/s, the links as given."""
    compute_s = args.batch_size / args.images_per_sec
    timeline = None if args.timeline is None else timeline_model.load_timeline(args.timeline)
    megabytes = (args.gradient_mb if timeline is None
                 else sum(nbytes for _, nbytes in timeline["gradients"]) / 1e6)
    gradient_bytes = megabytes * 1e6 / (2 if args.fp16 else 1)
    link_by_name = ring_model.links({}, compute_s, gradient_bytes, args)
    rows = [predict(layout, compute_s, args.batch_size, gradient_bytes, link_by_name,
                    timeline, network(args))
            for layout in args.layouts]
    return {
        "schema_version": SCHEMA_VERSION, "results": None, "launcher": None, "fp16": args.fp16,
        "source": {"images_per_sec": args.images_per_sec, "batch_per_rank": args.batch_size},
        "gradient_bytes": gradient_bytes, "compute_s": compute_s, "links": link_by_name,
        "timeline": timeline_record(args, timeline), "rows": rows, "validation": None,
    }


def build_report(args: argparse.Namespace) -> dict:
    if args.results is None:
        return described_report(args)
    data = load_results(args.results)
    timeline = None if args.timeline is None else timeline_model.load_timeline(args.timeline)
    compute_s, measured, link_by_name = model_inputs(data, args, fit=timeline is None)
    settings = data["settings"]
    if timeline is not None:
        timed_bytes = sum(nbytes for _, nbytes in timeline["gradients"])
        if abs(timed_bytes / settings["gradient_bytes"] - 1) > 0.01:
            raise UserError(f"{args.timeline}: {timed_bytes / 1e6:.1f} MB of gradients, "
                            f"{args.results}: {settings['gradient_bytes'] / 1e6:.1f} MB: "
                            "not the same model")
    batch = settings["batch_per_rank"]
    gradient_bytes = settings["gradient_bytes"]
    if args.fp16 and not settings.get("fp16_allreduce"):
        gradient_bytes /= 2
    # Rows measured with other gradients than those predicted cannot be compared.
    comparable = measured if gradient_bytes == settings["gradient_bytes"] else {}
    fitted_from = {layout for layout, m in measured.items()
                   if layout != (1, 1) and not m["oversubscribed"]}
    if timeline is not None:
        fitted_from = set()
    rows = [with_measured(predict(layout, compute_s, batch, gradient_bytes, link_by_name,
                                  timeline, network(args)),
                          comparable, batch, fitted_from)
            for layout in args.layouts]
    report = {
        "schema_version": SCHEMA_VERSION, "results": str(args.results),
        "launcher": args.launcher, "fp16": args.fp16,
        "source": {key: settings.get(key) for key in ("workload", "model", "batch_per_rank")},
        "gradient_bytes": gradient_bytes, "compute_s": compute_s, "links": link_by_name,
        "timeline": timeline_record(args, timeline), "rows": rows, "validation": None,
    }
    if args.validate is not None:
        other = load_results(args.validate)
        report["validation"] = {"results": str(args.validate),
                                "gradient_bytes": other["settings"]["gradient_bytes"],
                                "rows": validate(other, args, link_by_name)}
    return report


def write_matrix(out_dir: Path, report: dict, argv: list[str]) -> None:
    """The predicted layouts in the files and columns of a measured matrix
    (benchmarks/scaling_tables.py), every row and file marked predicted."""
    from benchmarks import scaling_tables

    out_dir.mkdir(exist_ok=True)
    one = report["rows"][0]["images_per_sec"] if report["rows"][0]["ranks"] == 1 else None
    rows = []
    for r in report["rows"]:
        ok = r["images_per_sec"] is not None
        rows.append({
            "layout": r["layout"], "nodes": r["nodes"], "ranks_per_node": r["ranks_per_node"],
            "ranks": r["ranks"], "launcher": "horovod", "status": "ok" if ok else "failed",
            "reason": None if ok else r["note"], "repeats": 1, "repeats_ok": int(ok),
            "oversubscribed": False, "predicted": True,
            "images_per_sec": r["images_per_sec"],
            "images_per_sec_per_rank": r["images_per_sec_per_rank"],
            "step_time_s": r["step_time_s"],
            "allreduce_time_s": r.get("exposed_comm_s", r["comm_time_s"]),
            "speedup": r["images_per_sec"] / one if ok and one else None,
            "efficiency": r["efficiency"]})
    command = "benchmarks/predict_scaling.py " + " ".join(argv)
    results = {"schema_version": SCHEMA_VERSION, "predicted": True, "command": command,
               "prediction": report, "rows": rows, "machine": machine_record()}
    atomic_write_json(out_dir / "results.json", results)
    atomic_write_bytes(out_dir / "scaling.csv", scaling_tables.scaling_csv(rows).encode())
    table = scaling_tables.markdown_table(rows, ["horovod"]).splitlines()
    marked = table[:2] + [line[: -len("|  |")] + "| predicted |" if line.endswith("|  |")
                          else line[:-1] + "(predicted) |" for line in table[2:]]
    atomic_write_bytes(out_dir / "scaling.md", (
        "PREDICTED, not measured: benchmarks/predict_scaling.py's timeline model "
        "(allreduce wait = the allreduce left exposed)\n\n"
        + markdown(report) + "\n" + "\n".join(marked) + f"\n\nCommand: `{command}`\n").encode())


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    report = build_report(args)
    if args.matrix_dir is not None:
        write_matrix(args.matrix_dir, report, argv)
    # The command names the inputs a described layout was given.
    write_outputs(args, markdown(report),
                  {**report, "command": "benchmarks/predict_scaling.py " + " ".join(argv)})
    return 0


def write_outputs(args: argparse.Namespace, text: str, record: dict) -> None:
    """The table on stdout, and in --markdown; the record, naming the
    machine, in --json (the predictors' commands share it)."""
    sys.stdout.write(text)
    if args.markdown is not None:
        atomic_write_bytes(args.markdown, text.encode())
    if args.json is not None:
        atomic_write_json(args.json, {**record, "machine": machine_record()})


def cli() -> None:
    """The command's entry (benchmarks/predict_scaling.py)."""
    run_main(lambda: main(sys.argv[1:]), prog=PROG)


if __name__ == "__main__":
    cli()

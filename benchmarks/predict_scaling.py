"""Predict throughput and scaling efficiency for layouts larger than the ones
measured, from a results.json written by benchmarks/run_matrix.sh.

The model is the textbook one for a ring allreduce after each step:

    step(N x G) = compute + 2(P-1) * alpha + 2(P-1)/P * S / B

P = N x G ranks, S the bytes of gradients each rank sends into the
allreduce (halved by --fp16-allreduce), and (alpha, B) the latency and
bandwidth of the slowest link the ring crosses: the network between nodes
when N > 1, the link inside a node (NVLink, PCIe, shared memory) when N = 1.
Images per second = P x batch / step; efficiency is against 1x1.

compute is the 1x1 step of the measured run. The links are either given
(--inter-gbit, --inter-latency-us, --intra-gbit, --intra-latency-us) or
fitted from the measured layouts that were not oversubscribed: Nx1 and NxG
runs fit the inter-node link, 1xG runs the intra-node link. A fitted
bandwidth is an effective one: it folds in what Horovod hides by overlapping
the allreduce with the backward pass and what the protocol costs, so a
prediction from it is as good as the assumption that both stay the same at
the larger layout. A given bandwidth is taken as raw: no overlap, so the
prediction is a lower bound on throughput.

Without a results.json, a layout can be described instead: one GPU's
images/s at its batch (--images-per-sec, --batch-size), the gradients'
size (--gradient-mb) and the links (--inter-gbit, and --intra-gbit for
layouts of one node). The links are then raw, so each layout gets two
bounds: no overlap (step = compute + allreduce) and full overlap (step =
the longer of the two, the allreduce hidden behind the backward pass as far
as it can be).

--validate OTHER.json tests the model on runs it was not fitted to: each
measured multi-rank layout of OTHER (e.g. the same matrix with
--fp16-allreduce) is predicted from OTHER's own 1x1 and gradient size with
the links fitted here, next to what was measured.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks.machine import machine_record
from horovod_train.core.atomic import atomic_write_bytes, atomic_write_json
from horovod_train.core.errors import ArgumentParser, UserError, run_main
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
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read: {err}") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
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


# ---- the model --------------------------------------------------------------

def ring_terms(ranks: int, gradient_bytes: float) -> tuple[float, float]:
    """(latency multiplier, bytes over the slowest link) of one ring allreduce."""
    return 2 * (ranks - 1), 2 * (ranks - 1) / ranks * gradient_bytes


def comm_time(ranks: int, gradient_bytes: float, link: dict) -> float:
    hops, moved = ring_terms(ranks, gradient_bytes)
    return hops * link["latency_s"] + moved / link["bytes_per_s"]


def fit_link(points: list[tuple[int, float]], gradient_bytes: float,
             latency_s: float | None) -> tuple[float, float, str]:
    """Least squares for (alpha, 1/B) from (ranks, exposed communication)
    points. With one rank count, or a latency given, only 1/B is fitted; a
    negative alpha is clamped to zero. The third value says which."""
    rows = [(*ring_terms(p, gradient_bytes), exposed) for p, exposed in points]
    if latency_s is None and len({p for p, _ in points}) >= 2:
        sxx = sum(h * h for h, _, _ in rows)
        syy = sum(m * m for _, m, _ in rows)
        sxy = sum(h * m for h, m, _ in rows)
        sxe = sum(h * e for h, _, e in rows)
        sye = sum(m * e for _, m, e in rows)
        det = sxx * syy - sxy * sxy
        alpha = (sxe * syy - sye * sxy) / det
        inverse_bandwidth = (sxx * sye - sxy * sxe) / det
        if alpha >= 0 and inverse_bandwidth > 0:
            return alpha, inverse_bandwidth, "both fitted"
        how = "latency clamped to 0"
    elif latency_s is None:
        how = "bandwidth only: one rank count, latency taken as 0"
    else:
        how = "latency given"
    latency_s = latency_s or 0.0
    inverse_bandwidth = (sum(m * (e - h * latency_s) for h, m, e in rows)
                         / sum(m * m for _, m, _ in rows))
    return latency_s, inverse_bandwidth, how


def links(measured: dict, compute_s: float, gradient_bytes: float,
          args: argparse.Namespace) -> dict[str, dict | None]:
    """The inter- and intra-node links: given on the command line, else fitted
    from the measured layouts that were not oversubscribed."""
    result: dict[str, dict | None] = {}
    for name, gbit, latency_us, pick in (
            ("inter", args.inter_gbit, args.inter_latency_us, lambda n, g: n > 1),
            ("intra", args.intra_gbit, args.intra_latency_us, lambda n, g: n == 1 and g > 1)):
        latency_s = None if latency_us is None else latency_us * 1e-6
        if gbit is not None:
            result[name] = {"bytes_per_s": gbit * 1e9 / 8, "latency_s": latency_s or 0.0,
                            "source": "given"}
            continue
        used = sorted(layout for layout, m in measured.items()
                      if pick(*layout) and not m["oversubscribed"])
        if not used:
            result[name] = None
            continue
        points = [(n * g, measured[(n, g)]["step_s"] - compute_s) for n, g in used]
        alpha, inverse_bandwidth, how = fit_link(points, gradient_bytes, latency_s)
        fitted = ", ".join(f"{n}x{g}" for n, g in used)
        if inverse_bandwidth <= 0:
            raise UserError(
                f"the {name}-node link cannot be fitted: {fitted} took no longer per step "
                f"than 1x1 (communication fully hidden); give --{name}-gbit")
        result[name] = {"bytes_per_s": 1 / inverse_bandwidth, "latency_s": alpha,
                        "source": f"fitted from {fitted} ({how})"}
    return result


def predict(layout: tuple[int, int], compute_s: float, batch: int, gradient_bytes: float,
            link_by_name: dict[str, dict | None]) -> dict:
    nodes, per_node = layout
    ranks = nodes * per_node
    row = {"layout": f"{nodes}x{per_node}", "nodes": nodes, "ranks_per_node": per_node,
           "ranks": ranks, "link": None, "step_time_s": None, "comm_time_s": None,
           "images_per_sec": None, "images_per_sec_per_rank": None, "efficiency": None,
           "images_per_sec_full_overlap": None, "efficiency_full_overlap": None,
           "note": ""}
    if ranks == 1:
        comm = 0.0
    else:
        row["link"] = "inter" if nodes > 1 else "intra"
        link = link_by_name[row["link"]]
        if link is None:
            row["note"] = (f"{row['link']}-node link unknown: measure a "
                           f"{'Nx1 or NxG' if nodes > 1 else '1xG'} layout or give "
                           f"--{row['link']}-gbit")
            return row
        comm = comm_time(ranks, gradient_bytes, link)
    step = compute_s + comm
    hidden = max(compute_s, comm)  # the full-overlap bound
    row.update(step_time_s=step, comm_time_s=comm, images_per_sec=ranks * batch / step,
               images_per_sec_per_rank=batch / step, efficiency=compute_s / step,
               images_per_sec_full_overlap=ranks * batch / hidden,
               efficiency_full_overlap=compute_s / hidden)
    return row


def with_measured(row: dict, measured: dict, batch: int, fitted_from: set) -> dict:
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


def model(data: dict, args: argparse.Namespace) -> tuple[float, dict, dict]:
    measured = median_steps(data, args.launcher)
    if (1, 1) not in measured:
        raise UserError(f"{args.results}: no successful 1x1 run of launcher "
                        f"{args.launcher}: the model needs it for the compute time")
    compute_s = measured[(1, 1)]["step_s"]
    gradient_bytes = data["settings"]["gradient_bytes"]
    return compute_s, measured, links(measured, compute_s, gradient_bytes, args)


def validate(other: dict, args: argparse.Namespace, link_by_name: dict) -> list[dict]:
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
    lines = [
        head,
        "",
        "Model: step = compute + 2(P-1)·alpha + 2(P-1)/P · S / B (ring allreduce over P "
        "ranks; the slowest link: between nodes when N > 1); full overlap: step = the "
        "longer of compute and allreduce",
        "",
        compute,
        f"- {describe_link('inter', report['links']['inter'])}",
        f"- {describe_link('intra', report['links']['intra'])}",
        "",
        *table(report["rows"]),
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
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the report as JSON here")
    args = parser.parse_args(argv)
    layout_options = ("images_per_sec", "batch_size", "gradient_mb")
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
            if getattr(args, f"{name}_gbit") is None and any(wanted(*lay)
                                                             for lay in args.layouts):
                parser.error(f"a described layout needs its links: give --{name}-gbit "
                             f"(layouts {where})")
    for option in ("markdown", "json"):
        path = getattr(args, option)
        if path is not None and not path.resolve().parent.is_dir():
            parser.error(f"--{option}: directory {path.resolve().parent} does not exist")
    return args


def described_report(args: argparse.Namespace) -> dict:
    """The report of a layout described on the command line: compute from
    one GPU's images/s, the links as given."""
    compute_s = args.batch_size / args.images_per_sec
    gradient_bytes = args.gradient_mb * 1e6 / (2 if args.fp16 else 1)
    link_by_name = links({}, compute_s, gradient_bytes, args)
    rows = [predict(layout, compute_s, args.batch_size, gradient_bytes, link_by_name)
            for layout in args.layouts]
    return {
        "schema_version": SCHEMA_VERSION, "results": None, "launcher": None, "fp16": args.fp16,
        "source": {"images_per_sec": args.images_per_sec, "batch_per_rank": args.batch_size},
        "gradient_bytes": gradient_bytes, "compute_s": compute_s, "links": link_by_name,
        "rows": rows, "validation": None,
    }


def build_report(args: argparse.Namespace) -> dict:
    if args.results is None:
        return described_report(args)
    data = load_results(args.results)
    compute_s, measured, link_by_name = model(data, args)
    settings = data["settings"]
    batch = settings["batch_per_rank"]
    gradient_bytes = settings["gradient_bytes"]
    if args.fp16 and not settings.get("fp16_allreduce"):
        gradient_bytes /= 2
    # Rows measured with other gradients than those predicted cannot be compared.
    comparable = measured if gradient_bytes == settings["gradient_bytes"] else {}
    fitted_from = {layout for layout, m in measured.items()
                   if layout != (1, 1) and not m["oversubscribed"]}
    rows = [with_measured(predict(layout, compute_s, batch, gradient_bytes, link_by_name),
                          comparable, batch, fitted_from)
            for layout in args.layouts]
    report = {
        "schema_version": SCHEMA_VERSION, "results": str(args.results),
        "launcher": args.launcher, "fp16": args.fp16,
        "source": {key: settings.get(key) for key in ("workload", "model", "batch_per_rank")},
        "gradient_bytes": gradient_bytes, "compute_s": compute_s, "links": link_by_name,
        "rows": rows, "validation": None,
    }
    if args.validate is not None:
        other = load_results(args.validate)
        report["validation"] = {"results": str(args.validate),
                                "gradient_bytes": other["settings"]["gradient_bytes"],
                                "rows": validate(other, args, link_by_name)}
    return report


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    report = build_report(args)
    text = markdown(report)
    sys.stdout.write(text)
    if args.markdown is not None:
        atomic_write_bytes(args.markdown, text.encode())
    if args.json is not None:

        atomic_write_json(args.json, {**report, "machine": machine_record()})
    return 0


def cli() -> None:
    """The command's entry (benchmarks/predict_scaling.py)."""
    run_main(lambda: main(sys.argv[1:]), prog=PROG)


if __name__ == "__main__":
    cli()

"""The scaling matrix's report: its runs summarised into one row per layout
and launcher, and the files run_matrix.sh writes from them: results.json,
scaling.csv, scaling.md and scaling.png (matrix.py measures).

Speed-up and efficiency are against 1x1 of the same launcher: efficiency =
images/s / (ranks x images/s of 1x1). Honesty marks in the notes:
"oversubscribed" where ranks outnumber the devices (GPUs, or CPU cores on
a CPU run), "high variance" where the repeats' coefficient of
variation exceeds 10%, a failed layout's one-line reason, and "not run yet"
in the tables rewritten between layouts.

Each scaling.png carries, in its PNG text metadata, the sha256 of the
results.json it was drawn from and of this file, so that a checkout can
tell a plot drawn from other figures or by other code than its own
(tests/single/test_plots_fresh.py). Re-drawn from their results.json, the
tables and plots of every folder under benchmarks/results that has a plot:

    python -m benchmarks.scaling_tables --rerender-all
"""

import argparse
import csv
import hashlib
import io
import json
import statistics
import struct
import sys
from pathlib import Path

from benchmarks import CHECKOUT
from horovod_train.core.atomic import atomic_write_bytes, atomic_write_json
from horovod_train.core.errors import ArgumentParser, UserError, run_main

PROG = "scaling_tables.py"
RESULTS = CHECKOUT / "benchmarks" / "results"

HIGH_VARIANCE = 0.10


def layout_name(nodes: int, per_node: int) -> str:
    return f"{nodes}x{per_node}"


def summarize(runs: list[dict], layouts: list[tuple[int, int]], launchers: list[str]) -> list:
    """One row per layout and launcher: medians over the ok repeats, speed-up
    and efficiency against 1x1 of the same launcher."""
    rows = []
    for launcher in launchers:
        baseline = None
        for nodes, per_node in sorted(layouts, key=lambda layout: layout[0] * layout[1]):
            layout = layout_name(nodes, per_node)
            mine = [r for r in runs if r["layout"] == layout and r["launcher"] == launcher]
            ok = [r for r in mine if r["status"] == "ok"]
            row = {"layout": layout, "nodes": nodes, "ranks_per_node": per_node,
                   "ranks": nodes * per_node, "launcher": launcher,
                   "repeats": len(mine), "repeats_ok": len(ok),
                   "oversubscribed": any(r["oversubscribed"] for r in mine)}
            if not mine:
                # The tables are rewritten after each layout; later ones have not run yet.
                row.update(status="pending", reason=None)
                rows.append(row)
                continue
            if not ok:
                row.update(status="failed", reason=next((r["reason"] for r in mine), None))
                rows.append(row)
                continue
            rates = [r["images_per_sec"] for r in ok]
            rate = statistics.median(rates)
            cv = statistics.stdev(rates) / statistics.mean(rates) if len(rates) > 1 else 0.0
            waits = [r["allreduce_time_s"] for r in ok if r["allreduce_time_s"] is not None]
            # (A --command run reports its throughput alone.)
            steps = [r["step_time_s"] for r in ok if r["step_time_s"] is not None]
            row.update(
                status="ok", reason=None, images_per_sec=rate,
                images_per_sec_per_rank=rate / row["ranks"],
                step_time_s=statistics.median(steps) if steps else None,
                allreduce_time_s=statistics.median(waits) if waits else None,
                cv=cv, high_variance=cv > HIGH_VARIANCE)
            if row["ranks"] == 1:
                baseline = rate
            row["speedup"] = rate / baseline if baseline else None
            row["efficiency"] = rate / (row["ranks"] * baseline) if baseline else None
            rows.append(row)
    return rows


def notes(row: dict) -> str:
    marks = []
    if row["status"] == "pending":
        marks.append("not run yet")
    elif row["status"] != "ok":
        marks.append(f"failed: {row['reason']}")
    if row["oversubscribed"]:
        marks.append("oversubscribed")
    if row.get("high_variance"):
        marks.append(f"high variance (cv {row['cv']:.0%})")
    if row["status"] == "ok" and row["repeats_ok"] < row["repeats"]:
        marks.append(f"{row['repeats'] - row['repeats_ok']} of {row['repeats']} repeats failed")
    return "; ".join(marks)


def fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def markdown_table(rows: list[dict], launchers: list[str]) -> str:
    """Layouts down, each launcher's figures across; Horovod/DDP where both ran."""
    header = ["layout", "ranks"]
    for launcher in launchers:
        name = {"horovod": "Horovod", "ddp": "DDP"}[launcher]
        header += [f"{name} images/s", "per rank", "speed-up", "efficiency"]
        if launcher == "horovod":
            header.append("allreduce wait ms")
    both = {"horovod", "ddp"} <= set(launchers)
    if both:
        header.append("Horovod / DDP")
    header.append("notes")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    for layout in layouts:
        by_launcher = {r["launcher"]: r for r in rows if r["layout"] == layout}
        first = next(iter(by_launcher.values()))
        cells = [layout, str(first["ranks"])]
        for launcher in launchers:
            row = by_launcher[launcher]
            ok = row["status"] == "ok"
            cells += [fmt(row.get("images_per_sec") if ok else None, ".1f"),
                      fmt(row.get("images_per_sec_per_rank") if ok else None, ".1f"),
                      fmt(row.get("speedup") if ok else None, ".2f"),
                      fmt(row.get("efficiency") if ok else None, ".0%")]
            if launcher == "horovod":
                wait = row.get("allreduce_time_s") if ok else None
                cells.append(fmt(None if wait is None else wait * 1e3, ".1f"))
        if both:
            h, d = by_launcher["horovod"], by_launcher["ddp"]
            ratio = (h["images_per_sec"] / d["images_per_sec"]
                     if h["status"] == d["status"] == "ok" else None)
            cells.append(fmt(ratio, ".2f"))
        marks = [f"{launcher}: {notes(r)}" if len(launchers) > 1 else notes(r)
                 for launcher, r in by_launcher.items() if notes(r)]
        cells.append("; ".join(marks))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


CSV_FIELDS = ["layout", "nodes", "ranks_per_node", "ranks", "launcher", "status",
              "images_per_sec", "images_per_sec_per_rank", "step_time_s", "allreduce_time_s",
              "speedup", "efficiency", "cv", "repeats", "repeats_ok", "oversubscribed",
              "high_variance", "reason"]


def scaling_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_FIELDS})
    return out.getvalue()


LAUNCHER_NAMES = {"horovod": "Horovod", "ddp": "torchrun + DDP"}
LAUNCHER_COLOURS = {"horovod": "tab:blue", "ddp": "tab:orange"}
# Each launcher's layout labels on its own side of the points, so that the
# two launchers' labels at one rank count never overlap: (offset in points,
# alignment).
LABEL_PLACES = {"horovod": ((-6, -3), "right"), "ddp": ((6, -3), "left")}


def machine_line(machine: dict | None) -> str:
    """CPU model, cores, memory and GPUs of a machine record
    (benchmarks/machine.py): the plot's second title line, and scaling.md's."""
    if not machine:
        return "machine not recorded"
    parts = [machine.get("cpu_model") or "CPU unknown", f"{machine.get('cpu_cores')} cores"]
    if machine.get("memory_gib"):
        parts.append(f"{machine['memory_gib']:g} GiB")
    gpus = [gpu["name"] for gpu in machine.get("gpus") or []]
    if gpus:
        names = list(dict.fromkeys(gpus))
        parts.append(", ".join(f"{gpus.count(name)} x {name}" for name in names))
    # A record added after the run says so: some of it may be inferred.
    added = " (added afterwards: results.json's machine.attributed)" if machine.get(
        "attributed") else ""
    return ", ".join(parts) + added


def scaling_figure(rows: list[dict], launchers: list[str], title: str):
    """Throughput and efficiency against total ranks: one point per layout
    and launcher, labelled with its layout (2x1 and 1x2 share a rank count,
    not a series), each launcher's linear scaling from its own 1x1, both
    axes from 0. Returns the matplotlib Figure."""
    from matplotlib.figure import Figure  # no pyplot: no global figure state

    fig = Figure(figsize=(11, 5.5))
    rate_ax, eff_ax = fig.subplots(1, 2)
    top_rank = max((r["ranks"] for r in rows), default=1)
    top_rate = 0.0
    for launcher in launchers:
        ok = [r for r in rows if r["launcher"] == launcher and r["status"] == "ok"]
        name, colour = LAUNCHER_NAMES[launcher], LAUNCHER_COLOURS[launcher]
        rate_ax.plot([r["ranks"] for r in ok], [r["images_per_sec"] for r in ok], "o",
                     color=colour, label=name)
        with_eff = [r for r in ok if r["efficiency"] is not None]
        eff_ax.plot([r["ranks"] for r in with_eff], [100 * r["efficiency"] for r in with_eff],
                    "o", color=colour, label=name)
        for ax, points in ((rate_ax, [(r, r["images_per_sec"]) for r in ok]),
                           (eff_ax, [(r, 100 * r["efficiency"]) for r in with_eff])):
            offset, align = LABEL_PLACES[launcher]
            for row, value in points:
                ax.annotate(row["layout"], (row["ranks"], value), textcoords="offset points",
                            xytext=offset, ha=align, fontsize=8, color=colour)
        base = next((r["images_per_sec"] for r in ok if r["ranks"] == 1), None)
        if base:
            rate_ax.plot([0, top_rank], [0, base * top_rank], ":", color=colour,
                         label=f"{name} linear (its 1x1 x ranks)")
        top_rate = max([top_rate, (base or 0) * top_rank] + [r["images_per_sec"] for r in ok])
    eff_ax.axhline(100, linestyle=":", color="grey", label="linear (100%)")
    top_eff = max([110.0] + [100 * r["efficiency"] for r in rows
                             if r["status"] == "ok" and r.get("efficiency") is not None])
    rate_ax.set(xlabel="total ranks (label: layout, nodes x ranks per node)", ylabel="images/s",
                title="throughput", ylim=(0, 1.1 * top_rate or 1))
    eff_ax.set(xlabel="total ranks (label: layout, nodes x ranks per node)",
               ylabel="scaling efficiency %", title="efficiency vs 1x1 of the same launcher",
               ylim=(0, 1.05 * top_eff))
    all_ranks = sorted({r["ranks"] for r in rows})
    for ax in (rate_ax, eff_ax):
        ax.set_xlim(0, top_rank + max(1.0, 0.1 * top_rank))
        ax.set_xticks(all_ranks)
        ax.grid(alpha=0.3)
        # Below the axes, where it covers no point.
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


# The PNG text keyword of the stamp, and the code that draws the plot
# (relative to the checkout): a change to it makes every plot stale.
STAMP_KEY = "rendered_from"
RENDERER_SOURCES = ("benchmarks/scaling_tables.py",)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plot_stamp(results_json: bytes) -> str:
    """What a scaling.png is drawn from: the sha256 of its results.json (the
    file beside it, as written) and of the renderer's source."""
    return json.dumps({
        "inputs": {"results.json": sha256(results_json)},
        "renderer": {name: sha256((CHECKOUT / name).read_bytes()) for name in RENDERER_SOURCES},
    }, sort_keys=True)


def scaling_png(rows: list[dict], launchers: list[str], title: str, stamp: str) -> bytes:
    out = io.BytesIO()
    # No "Software" entry (matplotlib's version): the same figures and code
    # give the same bytes, and the stamp says what they were.
    scaling_figure(rows, launchers, title).savefig(
        out, format="png", dpi=110, metadata={"Software": None, STAMP_KEY: stamp})
    return out.getvalue()


def png_text(png: bytes) -> dict[str, str]:
    """The tEXt entries of a PNG (keyword, NUL, Latin-1 text per chunk),
    read without an image library."""
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("not a PNG")
    entries, at = {}, 8
    while at + 8 <= len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        data = png[at + 8:at + 8 + length]
        if kind == b"tEXt":
            keyword, _, text = data.partition(b"\0")
            entries[keyword.decode("latin-1")] = text.decode("latin-1")
        if kind == b"IEND":
            break
        at += 12 + length  # length, type, data, CRC
    return entries


def settings_line(settings: dict) -> str:
    hosts = ", emulated hosts" if settings["emulate"] else ""
    if settings["workload"] == "command":
        return f"`{settings['user_command']}`, {settings['device']}{hosts}"
    return (f"{settings['model']} ({settings['workload']}), batch {settings['batch_per_rank']} "
            f"per rank, {settings['device']}{hosts}")


def repeats_line(settings: dict) -> str:
    if settings["workload"] == "command":
        return (f"median of {settings['repeats']} repeats of the throughput it prints "
                f"(matching `{settings['throughput_pattern']}`)")
    return (f"median of {settings['repeats']} repeats of {settings['steps']} steps after "
            f"{settings['warmup_steps']} warm-up steps")


def write_outputs(out_dir: Path, results: dict, launchers: list[str]) -> None:
    """The four files, each replaced whole (the matrix rewrites them after
    every layout, so an interrupted run still leaves complete ones)."""
    atomic_write_json(out_dir / "results.json", results)
    write_tables_and_plot(out_dir, results, launchers,
                          (out_dir / "results.json").read_bytes())


def write_tables_and_plot(out_dir: Path, results: dict, launchers: list[str],
                          results_json: bytes) -> None:
    """scaling.csv, scaling.md and scaling.png from results.json's figures
    (`results_json`: the file's bytes, for the plot's stamp)."""
    rows = results["rows"]
    atomic_write_bytes(out_dir / "scaling.csv", scaling_csv(rows).encode())
    s = results["settings"]
    machine = machine_line(results.get("machine"))
    table = markdown_table(rows, launchers)
    atomic_write_bytes(out_dir / "scaling.md", (
        f"{settings_line(s)}; {repeats_line(s)}\n\nMachine: {machine}\n\n{table}\n"
        f"Command: `{results['command']}`\n").encode())
    title = f"{settings_line(s)}\n{machine}"
    atomic_write_bytes(out_dir / "scaling.png",
                       scaling_png(rows, launchers, title, plot_stamp(results_json)))


def rerender(folder: Path) -> None:
    """A folder's tables and plot drawn again from its results.json, which
    stays as it is."""
    try:
        results_json = (folder / "results.json").read_bytes()
    except OSError as err:
        raise UserError(f"{folder}: no results.json to draw from ({err.strerror})") from None
    try:
        results = json.loads(results_json)
        launchers = results["settings"]["launchers"]
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"{folder}/results.json: not a results.json of benchmarks/run_matrix.sh "
                        f"({type(err).__name__}: {err})") from None
    write_tables_and_plot(folder, results, launchers, results_json)


def plotted_folders() -> list[Path]:
    """Every folder under benchmarks/results with a scaling.png."""
    return sorted(png.parent for png in RESULTS.rglob("scaling.png"))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description="Draw a scaling matrix's tables and plot "
                            "again from its results.json.")
    parser.add_argument("folders", type=Path, nargs="*", metavar="FOLDER",
                        help="folders holding a results.json of benchmarks/run_matrix.sh")
    parser.add_argument("--rerender-all", action="store_true",
                        help="every folder under benchmarks/results that has a scaling.png")
    args = parser.parse_args(argv)
    if bool(args.folders) == args.rerender_all:
        parser.error("give the folders, or --rerender-all")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    for folder in plotted_folders() if args.rerender_all else args.folders:
        rerender(folder)
        print(f"{PROG}: drew {folder / 'scaling.png'}", flush=True)
    return 0


def cli() -> None:
    """The command's entry (python -m benchmarks.scaling_tables)."""
    run_main(lambda: main(sys.argv[1:]), prog=PROG)


if __name__ == "__main__":
    cli()

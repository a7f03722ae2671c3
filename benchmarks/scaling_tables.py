"""The scaling matrix's report: its runs summarised into one row per layout
and launcher, and the files run_matrix.sh writes from them: results.json,
scaling.csv, scaling.md and scaling.png (matrix.py measures).

Speed-up and efficiency are against 1x1 of the same launcher: efficiency =
images/s / (ranks x images/s of 1x1). Honesty marks in the notes:
"oversubscribed" where ranks outnumber the devices (GPUs, or CPU cores on
a CPU run), "high variance" where the repeats' coefficient of
variation exceeds 10%, a failed layout's one-line reason, and "not run yet"
in the tables rewritten between layouts.
"""

import csv
import io
import statistics
from pathlib import Path

from horovod_train.core.atomic import atomic_write_bytes, atomic_write_json

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
            row.update(
                status="ok", reason=None, images_per_sec=rate,
                images_per_sec_per_rank=rate / row["ranks"],
                step_time_s=statistics.median(r["step_time_s"] for r in ok),
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
    (benchmarks/machine.py): the plot's second title line."""
    if not machine:
        return "machine not recorded"
    parts = [machine.get("cpu_model") or "CPU unknown", f"{machine.get('cpu_cores')} cores"]
    if machine.get("memory_gib"):
        parts.append(f"{machine['memory_gib']:g} GiB")
    gpus = [gpu["name"] for gpu in machine.get("gpus") or []]
    if gpus:
        names = list(dict.fromkeys(gpus))
        parts.append(", ".join(f"{gpus.count(name)} x {name}" for name in names))
    return ", ".join(parts)


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


def scaling_png(rows: list[dict], launchers: list[str], title: str) -> bytes:
    out = io.BytesIO()
    scaling_figure(rows, launchers, title).savefig(out, format="png", dpi=110)
    return out.getvalue()


def settings_line(settings: dict) -> str:
    return (f"{settings['model']} ({settings['workload']}), batch {settings['batch_per_rank']} "
            f"per rank, {settings['device']}" + (", emulated hosts" if settings["emulate"] else ""))


def write_outputs(out_dir: Path, results: dict, launchers: list[str]) -> None:
    """The four files, each replaced whole (the matrix rewrites them after
    every layout, so an interrupted run still leaves complete ones)."""
    rows = results["rows"]
    atomic_write_json(out_dir / "results.json", results)
    atomic_write_bytes(out_dir / "scaling.csv", scaling_csv(rows).encode())
    s = results["settings"]
    machine = machine_line(results.get("machine"))
    table = markdown_table(rows, launchers)
    atomic_write_bytes(out_dir / "scaling.md", (
        f"{settings_line(s)}; median of {s['repeats']} repeats of {s['steps']} steps after "
        f"{s['warmup_steps']} warm-up steps\n\nMachine: {machine}\n\n{table}\n"
        f"Command: `{results['command']}`\n").encode())
    title = f"{settings_line(s)}\n{machine}"
    atomic_write_bytes(out_dir / "scaling.png", scaling_png(rows, launchers, title))

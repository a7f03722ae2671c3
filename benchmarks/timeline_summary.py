"""Where Horovod's time goes, from its timeline: the file a run writes with
HOROVOD_TIMELINE=FILE (Chrome's trace format, one row per tensor): for each
activity, the time during which any tensor was in it (overlapping spans of
several tensors, and the one span of a fused buffer, count once).

    HOROVOD_TIMELINE=timeline.json horovodrun -np 2 -H localhost:2 \\
        python horovod_train/pytorch_mnist.py --benchmark-steps 150 --data-dir data
    python benchmarks/timeline_summary.py timeline.json --steps 155 --json summary.json

Activities, as Horovod names them: NEGOTIATE_ALLREDUCE runs from the first
rank's request for a tensor to the moment every rank has asked (waiting for
the slowest rank's backward pass, and for the next cycle); ALLREDUCE is the
operation itself, inside it MEMCPY_IN_FUSION_BUFFER, the transport's
reduction (MPI_ALLREDUCE, GLOO_ALLREDUCE) and MEMCPY_OUT_FUSION_BUFFER.
Tensors whose ALLREDUCE starts at the same moment went in one fused buffer.
--steps (warm-up steps included) gives the figures per step. The timeline
costs time itself: read the shares, not the step time, from a traced run.
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.machine import machine_record
from horovod_train.core import options
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, UserError, run_main

PROG = "timeline_summary.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("timeline", type=Path, help="the file HOROVOD_TIMELINE named")
    parser.add_argument("--steps", type=options.positive_int, default=None,
                        help="training steps the run took, to give figures per step")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    return parser.parse_args(argv)


def read_events(path: Path) -> list[dict]:
    """The trace's events. Horovod writes the list as it goes and closes it
    only at shutdown, so a file may end without its closing bracket."""
    try:
        text = path.read_text().strip().rstrip(",")
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    if not text.endswith("]"):
        text += "]"
    try:
        events = json.loads(text)
    except ValueError:
        raise UserError(f"{path} is not a Horovod timeline (not a JSON list of trace "
                        "events)") from None
    if not isinstance(events, list):
        raise UserError(f"{path} is not a Horovod timeline (not a JSON list of trace events)")
    return events


def covered_ms(spans: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) spans in microseconds, in ms."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total / 1e3


def summarize(events: list[dict], steps: int | None) -> dict:
    """Wall time and span count of each activity, and how many tensors each
    fused allreduce carried."""
    open_spans = defaultdict(list)  # tensor row -> stack of (activity, start)
    spans = defaultdict(list)  # activity -> (start, end) of every tensor's span
    fused = defaultdict(int)  # start of an ALLREDUCE -> tensors in it
    for event in events:
        row = event.get("pid")
        if event.get("ph") == "B":
            open_spans[row].append((event["name"], event["ts"]))
            if event["name"] == "ALLREDUCE":
                fused[event["ts"]] += 1
        elif event.get("ph") == "E" and open_spans[row]:
            name, start = open_spans[row].pop()
            spans[name].append((start, event["ts"]))
    totals = {name: covered_ms(found) for name, found in spans.items()}
    counts = {name: len(found) for name, found in spans.items()}
    activities = {name: {"total_ms": totals[name], "count": counts[name],
                         "per_step_ms": totals[name] / steps if steps else None}
                  for name in sorted(totals, key=totals.get, reverse=True)}
    responses = len(fused)
    return {"activities": activities, "steps": steps,
            "allreduce_tensors": sum(fused.values()), "allreduce_responses": responses,
            "tensors_per_response": sum(fused.values()) / responses if responses else None}


def main() -> int:
    args = parse_args(sys.argv[1:])
    summary = summarize(read_events(args.timeline), args.steps)
    if not summary["activities"]:
        raise UserError(f"{args.timeline} holds no Horovod activity")
    per_step = " per step" if args.steps else ""
    for name, figures in summary["activities"].items():
        shown = figures["per_step_ms"] if args.steps else figures["total_ms"]
        print(f"{name:28s} {shown:9.2f} ms{per_step}  ({figures['count']} spans)")
    if summary["allreduce_responses"]:
        print(f"{summary['allreduce_tensors']} allreduces in "
              f"{summary['allreduce_responses']} fused operations "
              f"({summary['tensors_per_response']:.1f} tensors each)")
    if args.json:

        atomic_write_json(args.json, {"timeline": str(args.timeline), **summary,
                                      "machine": machine_record()})
    return 0



def cli() -> None:
    """The command's entry (benchmarks/timeline_summary.py)."""
    run_main(main, prog=PROG)


if __name__ == "__main__":
    cli()

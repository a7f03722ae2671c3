"""The timeline model of benchmarks/predict_scaling.py, the point estimate
it gives with --timeline FILE (benchmarks/measure_timeline.py): the one-GPU
step is split into forward, backward and optimizer by the file's shares,
each gradient becomes ready at its fraction of the backward, and Horovod's
background loop is replayed: every cycle (--cycle-ms) it takes the
gradients ready by then, fuses them in ready order into buffers of at most
--fusion-mb, and allreduces the buffers one after another, each costing
--op-latency-us, the links' per-step latencies and its bytes over the
slowest link (--algorithm ring: one ring over all ranks; hierarchical: a
ring inside each node, the nodes' ring between, a ring inside again). The
step ends when both the backward and the last allreduce have, then pays
the optimizer. The allreduce left exposed is the step less the one-GPU
step. The links are taken as given (nothing is fitted), and the two bounds
stay beside the estimate as a check: no overlap (every gradient ready at
the backward's end) and full overlap.
"""

import math
import statistics
from pathlib import Path

from horovod_train.core.errors import UserError, read_json

PHASES = 8  # of Horovod's cycle against the step, averaged over


def load_timeline(path: Path) -> dict:
    """A backward timeline of benchmarks/measure_timeline.py, checked."""
    data = read_json(path)
    shares = data.get("shares") if isinstance(data, dict) else None
    gradients = data.get("gradients") if isinstance(data, dict) else None
    if (not isinstance(shares, dict)
            or not all(isinstance(shares.get(k), (int, float)) and shares[k] >= 0
                       for k in ("forward", "backward", "optimizer"))
            or not isinstance(gradients, list) or not gradients
            or not all(isinstance(g, list) and len(g) == 2
                       and all(isinstance(v, (int, float)) for v in g)
                       and 0 <= g[0] <= 1 and g[1] > 0 for g in gradients)):
        raise UserError(f"{path}: not a timeline of benchmarks/measure_timeline.py "
                        "(shares and gradients [ready fraction, bytes])")
    total = sum(shares[k] for k in ("forward", "backward", "optimizer"))
    if total <= 0:
        raise UserError(f"{path}: the step's shares add up to nothing")
    return {**data, "shares": {k: shares[k] / total for k in ("forward", "backward",
                                                               "optimizer")}}


def allreduce_time(nbytes: float, nodes: int, per_node: int, net: dict) -> float:
    """One allreduce of nbytes over nodes x per_node ranks. Bandwidth terms
    are the bytes the busiest link carries: a ring over P ranks sends
    2(P-1)/P of the buffer through every rank's link, and through every
    node's boundary. Latency: --op-latency-us once, and each of the ring's
    steps the latency of the link it crosses, as NCCL's tuning model counts
    them (src/graph/tuning.cc)."""
    ranks = nodes * per_node
    if ranks == 1:
        return 0.0
    intra, inter = net["intra"], net["inter"]
    cost = net["op_latency_s"]
    if nodes == 1:
        return cost + 2 * (per_node - 1) * (intra["latency_s"]
                                            + nbytes / per_node / intra["bytes_per_s"])
    if net["algorithm"] == "hierarchical" and per_node > 1:
        # Reduce-scatter inside the node, the nodes' ring on 1/G of the
        # buffer per rank (all G at once through the node's NICs), all-gather.
        inside = 2 * (per_node - 1) * (intra["latency_s"]
                                       + nbytes / per_node / intra["bytes_per_s"])
        between = 2 * (nodes - 1) * (inter["latency_s"]
                                     + nbytes / nodes / inter["bytes_per_s"])
        return cost + inside + between
    slowest = inter["bytes_per_s"] if per_node == 1 else min(inter["bytes_per_s"],
                                                            intra["bytes_per_s"])
    inter_steps = 2 * nodes if per_node > 1 else 2 * (ranks - 1)
    latency = (inter_steps * inter["latency_s"]
               + (2 * (ranks - 1) - inter_steps) * intra["latency_s"])
    return cost + latency + 2 * (ranks - 1) / ranks * nbytes / slowest


def replay(ready: list[tuple[float, float]], nodes: int, per_node: int, net: dict,
           start_s: float) -> tuple[float, float, int]:
    """Horovod's background loop over gradients (ready time, bytes), sorted
    by ready time: every cycle it takes what is ready, fuses it in order into
    buffers of at most the fusion threshold (a larger tensor goes alone), and
    runs the buffers one after another. Returns (when the last allreduce
    ends, the time spent in allreduces, how many there were)."""
    cycle, threshold = net["cycle_s"], net["fusion_bytes"]
    if cycle <= 0:
        return replay_buckets(ready, nodes, per_node, net, start_s)
    now, busy, operations, index, last_end = start_s, 0.0, 0, 0, start_s
    while index < len(ready):
        if ready[index][0] > now:
            # Asleep until the first cycle at or after the next gradient.
            gap = ready[index][0] - now
            now = now + math.ceil(gap / cycle) * cycle if cycle > 0 else ready[index][0]
        wake = now
        buffers: list[float] = []
        while index < len(ready) and ready[index][0] <= wake:
            nbytes = ready[index][1]
            if buffers and buffers[-1] + nbytes <= threshold:
                buffers[-1] += nbytes
            else:
                buffers.append(nbytes)
            index += 1
        spent = sum(allreduce_time(b, nodes, per_node, net) for b in buffers)
        busy += spent
        operations += len(buffers)
        last_end = wake + spent
        # The next cycle begins when this one's allreduces are done, and
        # not before a cycle time has passed.
        now = wake + max(spent, cycle)
    return last_end, busy, operations


def replay_buckets(ready: list[tuple[float, float]], nodes: int, per_node: int, net: dict,
                   start_s: float) -> tuple[float, float, int]:
    """A reducer without a cycle (PyTorch DDP's): gradients fill buckets of
    at most the fusion threshold in ready order, and each bucket's allreduce
    starts once its last gradient is ready and the one before has ended."""
    buckets: list[list[float]] = []  # [ready, bytes]
    for when, nbytes in ready:
        if buckets and buckets[-1][1] + nbytes <= net["fusion_bytes"]:
            buckets[-1] = [when, buckets[-1][1] + nbytes]
        else:
            buckets.append([when, nbytes])
    end, busy = start_s, 0.0
    for when, nbytes in buckets:
        spent = allreduce_time(nbytes, nodes, per_node, net)
        end = max(end, when) + spent
        busy += spent
    return end, busy, len(buckets)


def simulate_step(timeline: dict, compute_s: float, nodes: int, per_node: int,
                  net: dict) -> dict:
    """One step at a layout: the one-GPU step split by the timeline's shares,
    the allreduces replayed against the gradients' ready times. Also the two
    bounds, from the same allreduces: no overlap (every gradient ready when
    the backward ends) and full overlap (the longer of compute and
    allreduces)."""
    if nodes * per_node == 1:
        return {"step_s": compute_s, "comm_s": 0.0, "exposed_s": 0.0, "allreduces": 0,
                "step_no_overlap_s": compute_s, "step_full_overlap_s": compute_s}
    shares = timeline["shares"]
    forward = compute_s * shares["forward"]
    backward = compute_s * shares["backward"]
    optimizer = compute_s * shares["optimizer"]
    scale = 0.5 if net["fp16"] else 1.0
    ready = sorted((forward + fraction * backward, nbytes * scale)
                   for fraction, nbytes in timeline["gradients"])
    late = [(forward + backward, nbytes) for _, nbytes in ready]
    # Horovod's cycles keep their own beat, unrelated to the step's: the
    # figures are the mean over phases of the cycle against the forward's start.
    phases = [k / PHASES * net["cycle_s"] for k in range(PHASES)] if net["cycle_s"] > 0 else [0]
    steps, no_overlap, busy, operations, busy_late = [], [], 0.0, 0, 0.0
    for phase in phases:
        end, busy, operations = replay(ready, nodes, per_node, net, forward + phase)
        steps.append(max(forward + backward, end) + optimizer)
        end_late, busy_late, _ = replay(late, nodes, per_node, net, forward + phase)
        no_overlap.append(max(forward + backward, end_late) + optimizer)
    step = statistics.fmean(steps)
    return {"step_s": step, "comm_s": busy, "exposed_s": step - compute_s,
            "allreduces": operations,
            "step_no_overlap_s": statistics.fmean(no_overlap),
            "step_full_overlap_s": max(compute_s, busy_late)}


def predict_timeline(row: dict, compute_s: float, batch: int,
                     link_by_name: dict[str, dict | None], timeline: dict,
                     net: dict) -> dict:
    """The timeline model's row: the point estimate, the allreduce left
    exposed, and the no-overlap and full-overlap bounds. net holds Horovod's
    settings (fusion_bytes, cycle_s, op_latency_s, algorithm, fp16); the
    links come from link_by_name."""
    nodes, per_node, ranks = row["nodes"], row["ranks_per_node"], row["ranks"]
    needed = ([] if ranks == 1 else ["intra"] if nodes == 1
              else ["inter", "intra"] if per_node > 1 else ["inter"])
    row["link"] = "inter" if nodes > 1 else ("intra" if ranks > 1 else None)
    missing = [name for name in needed if link_by_name.get(name) is None]
    row.update(images_per_sec_no_overlap=None, efficiency_no_overlap=None,
               exposed_comm_s=None, allreduces=None)
    if missing:
        row["note"] = "; ".join(f"{name}-node link unknown: give --{name}-gbit"
                                for name in missing)
        return row
    inter = link_by_name.get("inter")
    if inter is not None and inter.get("per_gpu"):
        inter = {**inter, "bytes_per_s": inter["bytes_per_s"] * per_node}
    step = simulate_step(timeline, compute_s, nodes, per_node,
                         {**net, "intra": link_by_name.get("intra"), "inter": inter})
    row.update(step_time_s=step["step_s"], comm_time_s=step["comm_s"],
               exposed_comm_s=step["exposed_s"], allreduces=step["allreduces"],
               images_per_sec=ranks * batch / step["step_s"],
               images_per_sec_per_rank=batch / step["step_s"],
               efficiency=compute_s / step["step_s"],
               images_per_sec_no_overlap=ranks * batch / step["step_no_overlap_s"],
               efficiency_no_overlap=compute_s / step["step_no_overlap_s"],
               images_per_sec_full_overlap=ranks * batch / step["step_full_overlap_s"],
               efficiency_full_overlap=compute_s / step["step_full_overlap_s"])
    return row


"""The ring allreduce model of benchmarks/predict_scaling.py, the one it uses
without --timeline: the textbook cost of a ring allreduce after each step,

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

A layout described instead of measured (one GPU's images/s, the gradients'
size, the links) has raw links only, so each layout gets two bounds from
the same formula: no overlap (step = compute + allreduce) and full overlap
(step = the longer of the two, the allreduce hidden behind the backward
pass as far as it can be).

--validate OTHER.json tests the model on runs it was not fitted to: each
measured multi-rank layout of OTHER (e.g. the same matrix with
--fp16-allreduce) is predicted from OTHER's own 1x1 and gradient size with
the links fitted here, next to what was measured.
"""

import argparse

from horovod_train.core.errors import UserError


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
    from the measured layouts that were not oversubscribed (none are passed
    for the timeline model, which takes its links as given)."""
    result: dict[str, dict | None] = {}
    if getattr(args, "inter_gbit_per_gpu", None) is not None:
        latency_s = (args.inter_latency_us or 0.0) * 1e-6
        result["inter"] = {"bytes_per_s": args.inter_gbit_per_gpu * 1e9 / 8,
                           "latency_s": latency_s, "per_gpu": True,
                           "source": "given, one NIC per GPU"}
    for name, gbit, latency_us, pick in (
            ("inter", args.inter_gbit, args.inter_latency_us, lambda n, g: n > 1),
            ("intra", args.intra_gbit, args.intra_latency_us, lambda n, g: n == 1 and g > 1)):
        if name in result:
            continue
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


def predict_ring(row: dict, compute_s: float, batch: int, gradient_bytes: float,
                 link_by_name: dict[str, dict | None]) -> dict:
    """The ring model's row: the step with no overlap (compute + allreduce)
    and the full-overlap bound, over the slowest link the ring crosses."""
    nodes, ranks = row["nodes"], row["ranks"]
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

"""The timeline model (benchmarks/timeline_model.py), in process: the rules of
the allreduce's cost, Horovod's loop replayed against the gradients' ready
times, the bounds around the point estimate, and the committed comparisons
made again from their inputs."""

import json

import pytest
from conftest import REPO

from benchmarks import predict_emulated, predict_published, predict_scaling, timeline_model

INTRA = {"bytes_per_s": 100e9, "latency_s": 5e-6}
INTER = {"bytes_per_s": 10e9, "latency_s": 10e-6}
BASE = {"intra": INTRA, "inter": INTER, "op_latency_s": 0.0, "algorithm": "ring",
        "fusion_bytes": 64e6, "cycle_s": 0.0, "fp16": False}
RESULTS = REPO / "benchmarks" / "results"


def timeline(gradients, forward=0.25, backward=0.7, optimizer=0.05):
    return {"shares": {"forward": forward, "backward": backward, "optimizer": optimizer},
            "gradients": gradients}


def test_a_ring_inside_a_node_moves_2_g_minus_1_over_g_of_the_buffer():
    time = timeline_model.allreduce_time(80e6, 1, 8, BASE)
    assert time == pytest.approx(14 * 5e-6 + 2 * 7 / 8 * 80e6 / 100e9)
    assert timeline_model.allreduce_time(80e6, 1, 1, BASE) == 0


def test_across_nodes_the_slowest_link_carries_the_ring_and_latency_counts_its_steps():
    # 4 nodes of 2: the node's NIC (10 GB/s) is slower than the link inside.
    ring = timeline_model.allreduce_time(80e6, 4, 2, BASE)
    inter_steps = 2 * 4
    assert ring == pytest.approx(inter_steps * 10e-6 + (14 - inter_steps) * 5e-6
                                 + 2 * 7 / 8 * 80e6 / 10e9)
    one_per_node = timeline_model.allreduce_time(80e6, 4, 1, BASE)
    assert one_per_node == pytest.approx(6 * 10e-6 + 2 * 3 / 4 * 80e6 / 10e9)
    hierarchical = timeline_model.allreduce_time(80e6, 4, 2, {**BASE,
                                                              "algorithm": "hierarchical"})
    assert hierarchical == pytest.approx(2 * (5e-6 + 40e6 / 100e9)
                                         + 6 * (10e-6 + 20e6 / 10e9))


def test_gradients_ready_early_hide_behind_the_backward_pass():
    # All the bytes ready at the backward's start, and the allreduce shorter
    # than the backward: nothing exposed. Ready at its end: all of it exposed.
    compute = 1.0
    early = timeline([[0.0, 1e9]])
    late = timeline([[1.0, 1e9]])
    comm = timeline_model.allreduce_time(1e9, 2, 1, BASE)
    assert comm < 0.7
    hidden = timeline_model.simulate_step(early, compute, 2, 1, BASE)
    exposed = timeline_model.simulate_step(late, compute, 2, 1, BASE)
    assert hidden["step_s"] == pytest.approx(compute)
    assert exposed["step_s"] == pytest.approx(compute + comm)
    for step in (hidden, exposed):
        assert step["step_full_overlap_s"] <= step["step_s"] <= step["step_no_overlap_s"]
        assert step["step_no_overlap_s"] == pytest.approx(compute + comm)


def test_fusion_joins_what_is_ready_in_one_cycle_up_to_the_threshold():
    gradients = timeline([[1.0, 10e6]] * 8)
    net = {**BASE, "cycle_s": 1e-3, "op_latency_s": 1e-3}
    fused = timeline_model.simulate_step(gradients, 1.0, 2, 1, {**net, "fusion_bytes": 40e6})
    alone = timeline_model.simulate_step(gradients, 1.0, 2, 1, {**net, "fusion_bytes": 0})
    assert fused["allreduces"] == 2 and alone["allreduces"] == 8
    # Each allreduce pays the fixed cost and the ring's two steps of latency:
    # six more of them.
    assert alone["step_s"] - fused["step_s"] == pytest.approx(6 * (1e-3 + 2 * 10e-6))


def test_a_reducer_without_a_cycle_starts_each_bucket_when_it_is_full():
    gradients = timeline([[0.0, 30e6], [0.5, 30e6], [1.0, 30e6]])
    step = timeline_model.simulate_step(gradients, 1.0, 1, 8, {**BASE, "fusion_bytes": 25e6})
    assert step["allreduces"] == 3
    last = timeline_model.allreduce_time(30e6, 1, 8, BASE)
    assert step["step_s"] == pytest.approx(0.25 + 0.7 + last + 0.05)


def test_fp16_halves_the_bytes_and_one_rank_costs_nothing():
    gradients = timeline([[1.0, 1e9]])
    full = timeline_model.simulate_step(gradients, 1.0, 2, 1, BASE)
    half = timeline_model.simulate_step(gradients, 1.0, 2, 1, {**BASE, "fp16": True})
    assert half["comm_s"] == pytest.approx(full["comm_s"] / 2, rel=1e-3)
    assert timeline_model.simulate_step(gradients, 1.0, 1, 1, BASE)["step_s"] == 1.0


def test_a_described_cluster_with_a_nic_per_gpu_scales_the_node_link_with_its_gpus():
    argv = ["--timeline", str(REPO / "benchmarks" / "timelines" / "resnet50.json"),
            "--images-per-sec", "2000", "--batch-size", "128", "--layouts", "1x1,2x1,2x8",
            "--intra-gbit", "3600", "--inter-gbit-per-gpu", "25"]
    report = predict_scaling.build_report(predict_scaling.parse_args(argv))
    rows = {r["layout"]: r for r in report["rows"]}
    assert rows["1x1"]["efficiency"] == 1
    for row in rows.values():
        assert (row["efficiency_no_overlap"] - 1e-9 <= row["efficiency"]
                <= row["efficiency_full_overlap"] + 1e-9)
    # 8 NICs a node: the 2x8 ring's per-node link is 8 x 25 Gbit/s.
    assert rows["2x8"]["efficiency"] > rows["2x1"]["efficiency"] - 0.02


def test_the_committed_published_comparison_is_what_its_inputs_give():
    committed = json.loads((RESULTS / "predicted-published" / "comparison.json").read_text())
    again = predict_published.compare()
    assert [r["case"] for r in committed["comparisons"]] == [r["case"] for r in again]
    for old, new in zip(committed["comparisons"], again, strict=True):
        assert new["predicted_efficiency"] == pytest.approx(old["predicted_efficiency"],
                                                            abs=1e-6)
        assert new["bound_no_overlap"] <= new["predicted_efficiency"] + 1e-9
        assert new["predicted_efficiency"] <= new["bound_full_overlap"] + 1e-9



def test_a_measured_run_is_predicted_from_its_1x1_and_the_timeline_alone():
    """ResNet-18 on 32x32, one rank on each emulated host over 1 Gbit/s
    (Gloo): the 2x1 layout predicted from the run's own 1x1, the committed
    timeline and the allreduce measured between the hosts, within 10%."""
    run = predict_emulated.predict_run(
        RESULTS / "cpu-2core-horovod-vs-ddp" / "resnet18-4mb-fusion")
    (two_hosts,) = [r for r in run["layouts"] if r["layout"] == "2x1"]
    assert two_hosts["controller"] == "gloo"
    assert two_hosts["measured_images_per_sec"] == pytest.approx(134.2, abs=0.1)
    assert 0.9 <= two_hosts["predicted_over_measured"] <= 1.1
    # Most of the 47 MB allreduce is exposed: 1 Gbit/s is slower than the step.
    assert two_hosts["exposed_ms"] > 200

"""benchmarks/predict_scaling.py: the ring-allreduce model
(benchmarks/ring_model.py) recovers the links from runs it generated itself,
leaves out oversubscribed runs, takes given links over fitted ones, and
answers bad input with one line."""

import json
import subprocess

import pytest
from conftest import BIN, REPO

from benchmarks import predict_scaling, ring_model

SCRIPT = REPO / "benchmarks" / "predict_scaling.py"
COMMITTED = REPO / "benchmarks" / "results" / "cpu-2core-1gbit"

BATCH = 32
COMPUTE = 0.2                 # s per step
GRADIENTS = 100_000_000       # bytes
INTER = {"bytes_per_s": 1.25e9, "latency_s": 50e-6}   # 10 Gbit/s
INTRA = {"bytes_per_s": 50e9, "latency_s": 5e-6}


def model_rate(nodes: int, per_node: int, gradients: float = GRADIENTS) -> float:
    ranks = nodes * per_node
    link = INTER if nodes > 1 else INTRA
    step = COMPUTE + (ring_model.comm_time(ranks, gradients, link) if ranks > 1 else 0)
    return ranks * BATCH / step


def results(layouts, rate=model_rate, gradients=GRADIENTS, oversubscribed=(), **settings):
    runs = []
    for nodes, per_node in layouts:
        for repeat in range(3):
            runs.append({"layout": f"{nodes}x{per_node}", "nodes": nodes,
                         "ranks_per_node": per_node, "ranks": nodes * per_node,
                         "launcher": "horovod", "repeat": repeat, "status": "ok",
                         "oversubscribed": (nodes, per_node) in oversubscribed,
                         "images_per_sec": rate(nodes, per_node)})
    return {"schema_version": 1, "command": "run_matrix.sh ...",
            "settings": {"workload": "synthetic", "model": "resnet18", "batch_per_rank": BATCH,
                         "gradient_bytes": gradients, "fp16_allreduce": False, **settings},
            "runs": runs}


def write(tmp_path, data, name="results.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def report_for(path, *argv):
    return predict_scaling.build_report(predict_scaling.parse_args([str(path), *map(str, argv)]))


def run(*argv):
    return subprocess.run([str(BIN / "python"), str(SCRIPT), *map(str, argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def rows(report):
    return {r["layout"]: r for r in report["rows"]}


def test_links_fitted_from_runs_the_model_made_are_the_links_it_made_them_with(tmp_path):
    path = write(tmp_path, results([(1, 1), (1, 2), (1, 4), (2, 1), (4, 1), (2, 2)]))
    report = report_for(path, "--layouts", "1x8,4x8,16x8")
    inter, intra = report["links"]["inter"], report["links"]["intra"]
    assert inter["bytes_per_s"] == pytest.approx(INTER["bytes_per_s"], rel=1e-6)
    assert inter["latency_s"] == pytest.approx(INTER["latency_s"], rel=1e-4)
    assert intra["bytes_per_s"] == pytest.approx(INTRA["bytes_per_s"], rel=1e-6)
    assert inter["source"] == "fitted from 2x1, 2x2, 4x1 (both fitted)"
    assert report["compute_s"] == pytest.approx(COMPUTE)
    for layout, row in rows(report).items():
        nodes, per_node = map(int, layout.split("x"))
        assert row["images_per_sec"] == pytest.approx(model_rate(nodes, per_node), rel=1e-6)
        assert row["efficiency"] == pytest.approx(
            row["images_per_sec"] / (row["ranks"] * BATCH / COMPUTE))


def test_one_rank_count_fits_the_bandwidth_with_the_latency_given(tmp_path):
    path = write(tmp_path, results([(1, 1), (2, 1)]))
    report = report_for(path, "--inter-latency-us", "50")
    assert report["links"]["inter"]["bytes_per_s"] == pytest.approx(INTER["bytes_per_s"])
    assert report["links"]["inter"]["latency_s"] == pytest.approx(50e-6)
    # Without the latency the same point gives a slightly lower bandwidth: the
    # latency is folded into it.
    alone = report_for(path)["links"]["inter"]
    assert alone["latency_s"] == 0
    assert alone["bytes_per_s"] < INTER["bytes_per_s"]


def test_measured_rows_sit_next_to_predicted_ones_with_the_error(tmp_path):
    slower = lambda n, g: model_rate(n, g) * (0.8 if (n, g) == (2, 2) else 1.0)  # noqa: E731
    path = write(tmp_path, results([(1, 1), (2, 1), (2, 2)], rate=slower),)
    by = rows(report_for(path, "--inter-latency-us", "50", "--layouts", "1x1,2x2,4x8"))
    assert by["1x1"]["error"] == 0 and "compute" in by["1x1"]["note"]
    assert by["2x2"]["measured_images_per_sec"] == pytest.approx(slower(2, 2))
    assert by["2x2"]["error"] == pytest.approx(
        by["2x2"]["images_per_sec"] / slower(2, 2) - 1)
    assert "fitted to this row" in by["2x2"]["note"]
    assert by["4x8"]["measured_images_per_sec"] is None


def test_oversubscribed_runs_are_not_fitted(tmp_path):
    crawling = lambda n, g: model_rate(n, g) / (10 if (n, g) == (2, 2) else 1)  # noqa: E731
    path = write(tmp_path, results([(1, 1), (2, 1), (4, 1), (2, 2)], rate=crawling,
                                   oversubscribed={(2, 2)}))
    report = report_for(path, "--layouts", "2x2")
    assert report["links"]["inter"]["source"] == "fitted from 2x1, 4x1 (both fitted)"
    assert report["links"]["inter"]["bytes_per_s"] == pytest.approx(INTER["bytes_per_s"])
    assert "oversubscribed" in rows(report)["2x2"]["note"]


def test_a_link_that_was_not_measured_is_named_instead_of_guessed(tmp_path):
    path = write(tmp_path, results([(1, 1), (2, 1)]))
    row = rows(report_for(path, "--layouts", "1x8"))["1x8"]
    assert row["images_per_sec"] is None
    assert "--intra-gbit" in row["note"]
    row = rows(report_for(path, "--layouts", "1x8", "--intra-gbit", "400"))["1x8"]
    assert row["comm_time_s"] == pytest.approx(2 * 7 / 8 * GRADIENTS / 50e9)


def test_given_links_override_the_fit_and_fp16_halves_the_gradients(tmp_path):
    path = write(tmp_path, results([(1, 1), (2, 1)]))
    report = report_for(path, "--inter-gbit", "100", "--inter-latency-us", "10",
                        "--layouts", "4x8", "--fp16")
    assert report["links"]["inter"]["source"] == "given"
    row = rows(report)["4x8"]
    assert row["comm_time_s"] == pytest.approx(2 * 31 * 10e-6 + 2 * 31 / 32 * GRADIENTS / 2
                                               / 12.5e9)
    assert row["measured_images_per_sec"] is None  # measured without fp16: not comparable


def test_validation_predicts_another_run_from_its_own_compute_and_gradients(tmp_path):
    path = write(tmp_path, results([(1, 1), (2, 1)]))
    halved = results([(1, 1), (2, 1)], rate=lambda n, g: model_rate(n, g, GRADIENTS / 2),
                     gradients=GRADIENTS // 2, fp16_allreduce=True)
    other = write(tmp_path, halved, "fp16.json")
    report = report_for(path, "--inter-latency-us", "50", "--validate", other)
    (row,) = report["validation"]["rows"]
    assert row["layout"] == "2x1" and row["error"] == pytest.approx(0, abs=1e-9)


def test_the_committed_emulated_runs_give_a_report_in_markdown_and_json(tmp_path):
    result = run(COMMITTED / "mpi" / "results.json", "--validate",
                 COMMITTED / "mpi-fp16" / "results.json",
                 "--markdown", tmp_path / "p.md", "--json", tmp_path / "p.json")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "p.md").read_text() == result.stdout
    report = json.loads((tmp_path / "p.json").read_text())
    assert [r["layout"] for r in report["rows"]] == ["1x1", "1x2", "2x2", "2x4", "4x8", "16x8"]
    assert report["links"]["inter"]["source"].startswith("fitted from 2x1 (bandwidth only")
    # The emulated link is shaped to 1 Gbit/s; the effective one cannot exceed it.
    assert 0.1e9 / 8 < report["links"]["inter"]["bytes_per_s"] <= 1e9 / 8
    assert "| 16x8 | 128 |" in result.stdout and "Validation against" in result.stdout


@pytest.mark.parametrize("content, argv, message", [
    (None, [], "no such file"),
    ("{not json", [], "not JSON"),
    ('{"schema_version": 7}', [], "not a results.json"),
    (json.dumps(results([(2, 1)])), [], "no successful 1x1 run"),
    (json.dumps(results([(1, 1)])), ["--layouts", "2x0"], "'2x0' is not a layout"),
    (json.dumps(results([(1, 1)])), ["--inter-gbit", "-1"], "must be > 0"),
    (json.dumps(results([(1, 1), (2, 1)], rate=lambda n, g: n * g * BATCH / COMPUTE)), [],
     "communication fully hidden"),
])
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path, content, argv,
                                                                message):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    result = run(path, *argv, "--json", tmp_path / "out.json")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert message in lines[-1] and "Traceback" not in result.stderr
    assert lines[-1].startswith("predict_scaling: error:")
    assert not (tmp_path / "out.json").exists()


def described(*argv):
    return predict_scaling.build_report(predict_scaling.parse_args(list(map(str, argv))))


def test_a_described_layout_is_predicted_between_its_two_bounds():
    """No measured run: compute from one GPU's images/s, the links as given;
    no overlap adds the allreduce to the step, full overlap hides it behind
    the compute as far as it is shorter."""
    report = described("--images-per-sec", BATCH / COMPUTE, "--batch-size", BATCH,
                       "--gradient-mb", GRADIENTS / 1e6, "--inter-gbit", 10,
                       "--inter-latency-us", 50, "--intra-gbit", 400, "--intra-latency-us", 5,
                       "--layouts", "1x1,1x8,4x8,64x8")
    assert report["results"] is None and report["compute_s"] == pytest.approx(COMPUTE)
    by_layout = {row["layout"]: row for row in report["rows"]}
    assert by_layout["1x1"]["images_per_sec"] == pytest.approx(BATCH / COMPUTE)
    for nodes, per_node in ((1, 8), (4, 8), (64, 8)):
        row = by_layout[f"{nodes}x{per_node}"]
        comm = ring_model.comm_time(nodes * per_node, GRADIENTS,
                                    INTER if nodes > 1 else INTRA)
        assert row["images_per_sec"] == pytest.approx(model_rate(nodes, per_node))
        assert row["efficiency"] == pytest.approx(COMPUTE / (COMPUTE + comm))
        assert row["efficiency_full_overlap"] == pytest.approx(COMPUTE / max(COMPUTE, comm))
        assert row["efficiency"] <= row["efficiency_full_overlap"] <= 1
    # 10 Gbit/s and 100 MB: the allreduce between nodes outlasts the compute.
    assert by_layout["64x8"]["efficiency_full_overlap"] < 1
    text = predict_scaling.markdown(report)
    assert text.startswith("Predicted scaling of a described layout: one GPU at 160 images/s")
    # fp16 gradients: half the bytes.
    half = described("--images-per-sec", 160, "--batch-size", BATCH, "--gradient-mb", 100,
                     "--inter-gbit", 10, "--layouts", "4x1", "--fp16")
    assert half["gradient_bytes"] == 50e6


@pytest.mark.parametrize("argv, message", [
    (["--images-per-sec", "100"], "describe the layout: --batch-size, --gradient-mb missing"),
    (["--images-per-sec", "100", "--batch-size", "32", "--gradient-mb", "100"],
     "give --inter-gbit (layouts across nodes)"),
    (["--images-per-sec", "100", "--batch-size", "32", "--gradient-mb", "100",
      "--inter-gbit", "10", "--layouts", "1x1,1x8"], "give --intra-gbit (layouts inside a node)"),
    (["results.json", "--images-per-sec", "100"],
     "--images-per-sec describe a layout instead of a results.json"),
])
def test_a_described_layout_missing_a_part_is_one_line(argv, message):
    result = run(*argv)
    assert result.returncode == 2
    assert message in result.stderr.strip().splitlines()[-1]

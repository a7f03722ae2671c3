"""The scaling matrix's report: one row per layout and launcher from the
runs, its marks, and the four files (tests/cluster/test_matrix.py runs the matrix)."""

import csv
import json
import subprocess
import sys

import pytest
from conftest import REPO

from benchmarks import scaling_tables


def run_record(layout: str, launcher: str, rate: float, repeat: int = 0, **extra) -> dict:
    """A run as benchmarks/matrix.py records it, with the figures given."""
    nodes, per_node = (int(x) for x in layout.split("x"))
    return {"layout": layout, "nodes": nodes, "ranks_per_node": per_node,
            "ranks": nodes * per_node, "launcher": launcher, "repeat": repeat, "status": "ok",
            "reason": None, "oversubscribed": False, "images_per_sec": rate,
            "step_time_s": 0.1, "allreduce_time_s": 0.01 if launcher == "horovod" else None,
            **extra}


def test_speedup_and_efficiency_are_against_one_rank_of_the_same_launcher():
    runs = [run_record("1x1", "horovod", 100.0), run_record("1x2", "horovod", 180.0),
            run_record("2x2", "horovod", 300.0), run_record("1x1", "ddp", 120.0),
            run_record("1x2", "ddp", 150.0), run_record("2x2", "ddp", 240.0)]
    rows = scaling_tables.summarize(runs, [(1, 1), (1, 2), (2, 2)], ["horovod", "ddp"])
    by = {(r["layout"], r["launcher"]): r for r in rows}
    assert by["2x2", "horovod"]["speedup"] == pytest.approx(3.0)
    assert by["2x2", "horovod"]["efficiency"] == pytest.approx(0.75)
    assert by["1x2", "ddp"]["efficiency"] == pytest.approx(150 / (2 * 120))
    assert by["2x2", "horovod"]["images_per_sec_per_rank"] == pytest.approx(75.0)
    table = scaling_tables.markdown_table(rows, ["horovod", "ddp"])
    assert "| 2x2 | 4 | 300.0 | 75.0 | 3.00 | 75% | 10.0 | 240.0 | 60.0 | 2.00 | 50% | 1.25 |" \
        in table


def test_the_median_of_repeats_counts_and_spread_is_flagged():
    runs = [run_record("1x1", "horovod", r, repeat=i) for i, r in enumerate([100, 50, 104])]
    [row] = scaling_tables.summarize(runs, [(1, 1)], ["horovod"])
    assert row["images_per_sec"] == 100
    assert row["high_variance"] is True
    assert "high variance" in scaling_tables.notes(row)


def test_failed_and_oversubscribed_layouts_are_marked():
    runs = [run_record("1x1", "horovod", 100.0),
            run_record("1x2", "horovod", 150.0, oversubscribed=True),
            {**run_record("2x4", "horovod", 0.0), "status": "failed",
             "reason": "no hostfile hostfiles/2x4"}]
    rows = scaling_tables.summarize(runs, [(1, 1), (1, 2), (2, 4)], ["horovod"])
    table = scaling_tables.markdown_table(rows, ["horovod"])
    assert "oversubscribed" in table.splitlines()[3]
    assert "| 2x4 | 8 | n/a |" in table and "failed: no hostfile hostfiles/2x4" in table


def test_layouts_still_to_run_are_marked_so_in_the_tables_written_between_layouts():
    rows = scaling_tables.summarize([run_record("1x1", "horovod", 100.0)], [(1, 1), (1, 2)],
                                    ["horovod"])
    assert [row["status"] for row in rows] == ["ok", "pending"]
    assert "| 1x2 | 2 | n/a |" in scaling_tables.markdown_table(rows, ["horovod"])
    assert scaling_tables.notes(rows[1]) == "not run yet"


def test_the_four_files_are_written_from_the_rows(tmp_path):
    runs = [run_record("1x1", "horovod", 100.0), run_record("1x2", "horovod", 180.0)]
    results = {"command": "benchmarks/run_matrix.sh --layouts 1x1,1x2", "runs": runs,
               "rows": scaling_tables.summarize(runs, [(1, 1), (1, 2)], ["horovod"]),
               "settings": {"model": "mnist_cnn", "workload": "mnist", "batch_per_rank": 64,
                            "device": "cpu", "emulate": False, "repeats": 1, "steps": 10,
                            "warmup_steps": 2}}
    scaling_tables.write_outputs(tmp_path, results, ["horovod"])
    assert json.loads((tmp_path / "results.json").read_text())["rows"] == results["rows"]
    with open(tmp_path / "scaling.csv") as f:
        assert [row["speedup"] for row in csv.DictReader(f)] == ["1.0", "1.8"]
    table = (tmp_path / "scaling.md").read_text()
    assert "| 1x2 | 2 | 180.0 | 90.0 | 1.80 | 90% |" in table
    assert table.endswith("Command: `benchmarks/run_matrix.sh --layouts 1x1,1x2`\n")
    assert (tmp_path / "scaling.png").read_bytes().startswith(b"\x89PNG")


MACHINE = {"cpu_model": "Some CPU 9000", "cpu_cores": 2, "memory_gib": 8.0,
           "gpus": [{"name": "Some GPU", "driver": "1.0"}] * 2}


def plotted_figure():
    runs = [run_record("1x1", "horovod", 100.0), run_record("1x2", "horovod", 180.0),
            run_record("2x1", "horovod", 150.0), run_record("2x2", "horovod", 300.0),
            run_record("1x1", "ddp", 120.0), run_record("1x2", "ddp", 200.0),
            run_record("2x1", "ddp", 170.0), run_record("2x2", "ddp", 240.0)]
    layouts = [(1, 1), (1, 2), (2, 1), (2, 2)]
    rows = scaling_tables.summarize(runs, layouts, ["horovod", "ddp"])
    title = f"mnist_cnn\n{scaling_tables.machine_line(MACHINE)}"
    return scaling_tables.scaling_figure(rows, ["horovod", "ddp"], title)


def test_the_plot_starts_both_axes_at_zero_and_names_the_machine():
    fig = plotted_figure()
    rate_ax, eff_ax = fig.axes
    for ax in (rate_ax, eff_ax):
        assert ax.get_xlim()[0] == 0 and ax.get_ylim()[0] == 0
        assert ax.get_xscale() == "linear"
        assert ax.get_xlim()[1] > 4
    assert rate_ax.get_ylim()[1] >= 4 * 120  # DDP's linear line fits
    assert fig._suptitle.get_text() == (
        "mnist_cnn\nSome CPU 9000, 2 cores, 8 GiB, 2 x Some GPU")


def test_each_launcher_has_its_linear_line_and_a_labelled_unjoined_point_per_layout():
    rate_ax, eff_ax = plotted_figure().axes
    lines = {line.get_label(): line for line in rate_ax.get_lines()}
    for name, base in (("Horovod", 100.0), ("torchrun + DDP", 120.0)):
        linear = lines[f"{name} linear (its 1x1 x ranks)"]
        assert list(linear.get_xdata()) == [0, 4]
        assert list(linear.get_ydata()) == [0, 4 * base]
        points = lines[name]
        assert points.get_linestyle() == "None"  # 1x2 and 2x1 are not a series
        assert sorted(zip(points.get_xdata(), points.get_ydata(), strict=True))[:3] == (
            [(1, base), (2, 150.0 if name == "Horovod" else 170.0),
             (2, 180.0 if name == "Horovod" else 200.0)])
    for ax in (rate_ax, eff_ax):
        labels = sorted(text.get_text() for text in ax.texts)
        assert labels == sorted(["1x1", "1x2", "2x1", "2x2"] * 2)
    # The efficiency panel: 2x1's point where 1x2's is, each labelled.
    by_label = {(t.get_text(), t.get_color()): t.xy for t in eff_ax.texts}
    assert by_label[("2x1", "tab:blue")] == (2, pytest.approx(75.0))
    assert by_label[("1x2", "tab:blue")] == (2, pytest.approx(90.0))


def test_without_a_machine_record_the_title_says_so():
    assert scaling_tables.machine_line(None) == "machine not recorded"
    assert scaling_tables.machine_line({**MACHINE, "gpus": []}) == (
        "Some CPU 9000, 2 cores, 8 GiB")


def test_a_machine_record_added_afterwards_says_so():
    added = {**MACHINE, "gpus": [], "attributed": "added afterwards from the notes"}
    assert scaling_tables.machine_line(added) == (
        "Some CPU 9000, 2 cores, 8 GiB (added afterwards: results.json's machine.attributed)")


def test_redrawing_a_folder_without_a_readable_results_json_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{oops")
    for folder, said in ((tmp_path / "missing", "no results.json to draw from"),
                         (tmp_path / "broken", "not a results.json of benchmarks/run_matrix.sh")):
        result = subprocess.run([sys.executable, "-m", "benchmarks.scaling_tables", str(folder)],
                                cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("scaling_tables.py: error: ") and said in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "broken" / "scaling.png").exists()

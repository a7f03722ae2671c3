"""benchmarks/run_matrix.sh: the layouts' hosts and commands, a row for
every layout (a failed one with its reason) while the rest run, and all
four files written. The tiny matrix runs for real on the emulated hosts
(the rows' figures and marks: tests/single/test_scaling_tables.py)."""

import csv
import json
import subprocess
from dataclasses import replace

import pytest
from conftest import BIN, REPO

from benchmarks import matrix
from horovod_train.core.errors import UserError

RUN_MATRIX = REPO / "benchmarks" / "run_matrix.sh"


def run_matrix(*argv: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUN_MATRIX), *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={"HVT_PYTHON": str(BIN / "python"),
                                                "PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin"})


@pytest.mark.parametrize("model, device, nodes, chosen", [
    ("resnet18", "cpu", 1, None), ("resnet18", "cpu", 2, "gloo"), ("resnet18", "cuda", 2, None),
    ("mnist_cnn", "cpu", 2, None)])
def test_the_controller_is_gloo_for_big_gradients_across_cpu_hosts_unless_one_is_asked_for(
        model, device, nodes, chosen):
    settings = replace(matrix.parse_args(["--layouts", "1x1", "--model", model]), device=device)
    assert matrix.controller(settings, nodes) == chosen
    settings = replace(settings, horovod=replace(settings.horovod, controller="mpi"))
    assert matrix.controller(settings, nodes) == "mpi"


def layout_args(hostfile_dir, hosts=None, emulate=True, device="cpu", gpus=0):
    """The matrix's settings with these hosts and devices."""
    cluster = matrix.Cluster(hosts=tuple(hosts) if hosts else None, hostfile_dir=hostfile_dir,
                             ssh_port=None, emulate=emulate, link_rate=None, link_delay=None)
    return replace(matrix.parse_args([]), cluster=cluster, device=device, gpus=gpus)


def test_a_layout_needs_its_slots(tmp_path):
    (tmp_path / "2x4").write_text("a slots=4\nb slots=2\n")
    (tmp_path / "2x2").write_text("# two nodes\na slots=4\n\nb slots=2  # b\nc slots=2\n")
    (tmp_path / "2x1").write_text("a\nb\n")  # hosts alone: one slot each
    (tmp_path / "1x1").write_text("a slots=1\nb slot=1\n")
    args = layout_args(tmp_path)  # --emulate: a and b resolve on host a
    with pytest.raises(UserError, match="b has 2 slots, the layout needs 4"):
        matrix.layout_hosts(args, 2, 4)
    with pytest.raises(UserError, match="no hostfile"):
        matrix.layout_hosts(args, 1, 2)
    with pytest.raises(UserError, match=f"hostfile {tmp_path}/1x1:2: cannot read 'b slot=1'"):
        matrix.layout_hosts(args, 1, 1)
    assert matrix.layout_hosts(args, 2, 2) == ["a", "b"]
    assert matrix.layout_hosts(args, 2, 1) == ["a", "b"]
    assert matrix.layout_hosts(layout_args(tmp_path, hosts=["x", "y", "z"]), 2, 4) == ["x", "y"]


def test_on_one_machine_the_hostfiles_unknown_hosts_leave_one_node_layouts_to_it():
    """The shipped hostfiles name the emulated a and b, unknown outside
    them: typed bare, one-node layouts run here, two-node ones say how."""
    args = layout_args(REPO / "hostfiles", emulate=False)
    assert not matrix.resolves("a")
    assert matrix.layout_hosts(args, 1, 1) == ["localhost"]
    assert matrix.layout_hosts(args, 1, 2) == ["localhost"]
    with pytest.raises(UserError) as refused:
        matrix.layout_hosts(args, 2, 2)
    assert str(refused.value) == (
        f"needs 2 nodes, and 2x2 names a, b, unknown here: name your nodes with --hosts, list "
        f"them in {REPO}/hostfiles/2x2, or emulate two hosts on this machine with --emulate")
    # On GPUs a node's ranks each need a GPU (NCCL refuses two ranks on one).
    with pytest.raises(UserError, match="^needs 2 GPUs per node, this machine has 1"):
        matrix.layout_hosts(layout_args(REPO / "hostfiles", emulate=False, device="cuda",
                                        gpus=1), 1, 2)


@pytest.mark.parametrize("argv, message", [
    (["--layouts", "2y2"], "want NODESxGPUS"),
    (["--layouts", "0x2"], "want NODESxGPUS"),
    (["--launchers", "mpi"], "choose from horovod, ddp"),
    (["--link-rate", "1gbit"], "add --emulate"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--fusion-threshold-mb", "-1"], "--fusion-threshold-mb must be at least 0"),
    (["--cycle-time-ms", "0"], "--cycle-time-ms must be positive"),
])
def test_bad_options_exit_2_with_one_error_line(argv, message):
    result = run_matrix(*argv, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr.splitlines()[-1]


def test_unrunnable_layouts_get_a_row_with_the_reason(mnist_dir, tmp_path):
    """That the other layouts still run: test_matrix_bare.py's two-node rows."""
    hostfiles = tmp_path / "hostfiles"
    hostfiles.mkdir()
    # 127.0.0.2 on port 1: loopback, and nothing listens there.
    (hostfiles / "2x1").write_text("localhost slots=1\n127.0.0.2 slots=1\n")
    (hostfiles / "2x2").write_text("localhost slots=2\n127.0.0.2 slot=2\n")
    out = tmp_path / "out"
    result = run_matrix("--hostfile-dir", str(hostfiles), "--ssh-port", "1",
                        "--layouts", "2x1,2x2", "--launchers", "horovod", "--repeats", "1",
                        "--steps", "2", "--warmup-steps", "1", "--batch-size", "16",
                        "--data-dir", str(mnist_dir), "--out-dir", str(out))
    # Nothing measured: a failed run, its tables written all the same.
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        f"run_matrix: error: no layout ran; each one's reason is in {out / 'scaling.md'}")
    rows = {r["layout"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert rows["2x1"]["status"] == "failed"
    assert rows["2x1"]["reason"] == ("cannot reach host 127.0.0.2 on SSH port 1: connection "
                                     "refused (no sshd listens there: is the host's sshd up, "
                                     "and is -p its port?)")
    assert rows["2x2"]["status"] == "failed"
    assert rows["2x2"]["reason"].startswith(f"hostfile {hostfiles}/2x2:2: cannot read")
    table = (out / "scaling.md").read_text()
    assert "failed: cannot reach host 127.0.0.2" in table


@pytest.mark.slow
@pytest.mark.cluster
def test_tiny_matrix_on_the_emulated_hosts(cluster, mnist_dir, tmp_path):
    # One repeat: how repeats are combined is test_the_median_of_repeats_...'s.
    # The baseline and a layout of two ranks on each of two hosts.
    result = run_matrix("--emulate", "--layouts", "1x1,2x2", "--repeats", "1",
                        "--steps", "4", "--warmup-steps", "1", "--batch-size", "32",
                        "--data-dir", str(mnist_dir), "--out-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for name in ("results.json", "scaling.csv", "scaling.md", "scaling.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["machine"]["commit"]
    assert results["settings"]["gradient_bytes"] == 4 * results["settings"]["parameters"]

    runs = results["runs"]
    assert len(runs) == 2 * 2  # layouts x launchers
    for run in runs:
        assert run["status"] == "ok", run["reason"]
        assert len(run["per_rank"]) == run["ranks"]
        assert run["images_per_sec"] == pytest.approx(
            sum(r["images_per_sec"] for r in run["per_rank"]))
        hosts = sorted(r["host"] for r in run["per_rank"])
        expected = {"1x1": ["a"], "2x2": ["a", "a", "b", "b"]}
        assert hosts == expected[run["layout"]], run
    rows = results["rows"]
    assert {(r["layout"], r["launcher"]) for r in rows} == {
        (layout, launcher) for layout in ("1x1", "2x2") for launcher in ("horovod", "ddp")}
    for launcher in ("horovod", "ddp"):
        base = next(r for r in rows if r["launcher"] == launcher and r["ranks"] == 1)
        for row in (r for r in rows if r["launcher"] == launcher):
            assert row["efficiency"] == pytest.approx(
                row["images_per_sec"] / (row["ranks"] * base["images_per_sec"]))
    # Two emulated hosts share this machine's cores: 2x2 is 4 ranks on them.
    cores = results["machine"]["cpu_cores"]
    assert all(r["oversubscribed"] == (r["ranks"] > cores) for r in rows)
    with open(tmp_path / "scaling.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    table = (tmp_path / "scaling.md").read_text()
    assert all(f"| {layout} |" in table for layout in ("1x1", "2x2"))
    assert "Horovod / DDP" in table

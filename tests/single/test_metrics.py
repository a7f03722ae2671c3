"""Rank 0's reports: JSON lines and TensorBoard scalars that TensorBoard
itself reads back, and a summary whose totals are the sums of the ranks."""

import datetime
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

from horovod_train.core import metrics
from horovod_train.core.errors import RunFailed, UserError
from horovod_train.torch.options import parse_args


def record(epoch, accuracy):
    return metrics.epoch_record(epoch, 0.1, [20.0, 90.0, 100.0, 500.0],
                                {"test_loss": 0.3, "test_accuracy": accuracy}, 2.0)


def test_epoch_record_turns_sums_into_means():
    r = record(1, 0.9)
    assert r["train_loss"] == 0.2 and r["train_accuracy"] == 0.9
    assert r["images_per_sec"] == 500.0 and r["epoch_time_s"] == 2.0


def test_metrics_log_writes_json_lines_and_tensorboard_scalars(tmp_path):
    log = metrics.MetricsLog(tmp_path, enabled=True)
    log.log_epoch(record(1, 0.9))
    log.log_epoch(record(2, 0.95))
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [1, 2]

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("test_accuracy")
    assert [(s.step, round(s.value, 4)) for s in scalars] == [(1, 0.9), (2, 0.95)]
    assert "train_loss" in events.Tags()["scalars"]


def test_a_full_disk_under_the_metrics_line_is_one_line_naming_the_file(tmp_path, monkeypatch):
    (tmp_path / "metrics.jsonl").symlink_to("/dev/full")  # every write: no space left
    # Opened as after an elastic reset: a new run would set the link aside.
    monkeypatch.setattr(metrics, "_OPENED", {tmp_path.resolve()})
    log = metrics.MetricsLog(tmp_path, enabled=True)
    with pytest.raises(UserError) as err:
        log.log_epoch(record(1, 0.5))
    assert str(err.value) == f"cannot write {tmp_path / 'metrics.jsonl'}: No space left on device"
    log.close()  # nothing buffered to fail again


def test_a_resumed_run_keeps_earlier_epochs(tmp_path):
    for epoch in (1, 2):
        log = metrics.MetricsLog(tmp_path, enabled=True, epochs_done=epoch - 1)
        log.log_epoch(record(epoch, 0.9))
        log.close()
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_a_resumed_run_drops_epochs_its_checkpoint_does_not_hold(tmp_path):
    """Stopped after epoch 3's line but before its checkpoint: resumed after
    epoch 2, epoch 3 is trained again and logged once; a torn last line goes."""
    log = metrics.MetricsLog(tmp_path, enabled=True, epochs_done=0)
    for epoch in (1, 2, 3):
        log.log_epoch(record(epoch, 0.9))
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 4, "train_lo')
    log = metrics.MetricsLog(tmp_path, enabled=True, epochs_done=2)
    log.log_epoch(record(3, 0.95))
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(line["epoch"], line["test_accuracy"]) for line in lines] == [
        (1, 0.9), (2, 0.9), (3, 0.95)]


@pytest.fixture
def new_process(monkeypatch):
    """Each MetricsLog after this call opens as a new process would (a new
    run, or a resumed one), not as an elastic run's reset in the same one."""
    def forget():
        monkeypatch.setattr(metrics, "_OPENED", set())
    return forget


def scalar_steps(directory, tag):
    events = EventAccumulator(str(directory))
    events.Reload()
    return [(s.step, round(s.value, 4)) for s in events.Scalars(tag)]


def test_a_new_run_in_the_same_log_dir_sets_the_earlier_records_aside(tmp_path, new_process):
    """TensorBoard pointed at the log dir then lists two runs; checkpoints stay."""
    new_process()
    log = metrics.MetricsLog(tmp_path, enabled=True)
    log.log_epoch(record(1, 0.9))
    log.close()
    (tmp_path / "summary.json").write_text("{}\n")
    (tmp_path / "checkpoints").mkdir()
    new_process()
    log = metrics.MetricsLog(tmp_path, enabled=True)
    log.log_epoch(record(1, 0.8))
    log.close()
    (earlier,) = (tmp_path / "earlier").iterdir()
    assert sorted(p.name for p in earlier.iterdir()) == ["metrics.jsonl", "summary.json",
                                                         "tensorboard"]
    assert json.loads((earlier / "metrics.jsonl").read_text())["test_accuracy"] == 0.9
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["test_accuracy"] == 0.8
    assert (tmp_path / "checkpoints").is_dir() and not (tmp_path / "summary.json").exists()

    runs = EventMultiplexer().AddRunsFromDirectory(str(tmp_path))
    runs.Reload()
    assert sorted(runs.Runs()) == [f"earlier/{earlier.name}/tensorboard", "tensorboard"]
    assert scalar_steps(earlier / "tensorboard", "test_accuracy") == [(1, 0.9)]
    assert scalar_steps(tmp_path / "tensorboard", "test_accuracy") == [(1, 0.8)]


def test_an_elastic_reset_goes_on_with_the_same_records(tmp_path, new_process):
    """Opened again by the same process (after a reset, no epoch done), the
    log is the same run's: nothing set aside."""
    new_process()
    metrics.MetricsLog(tmp_path, enabled=True).close()
    metrics.MetricsLog(tmp_path, enabled=True).close()
    assert not (tmp_path / "earlier").exists()


def test_a_resumed_run_shows_each_epoch_once_in_tensorboard(tmp_path, new_process):
    """Stopped after epoch 3's scalars but before its checkpoint, resumed
    after epoch 2: TensorBoard reads epoch 3 once, the new one; the batch
    lines of --log-interval are trimmed the same way."""
    new_process()
    log = metrics.MetricsLog(tmp_path, enabled=True, batches_per_epoch=10)
    for epoch in (1, 2, 3):
        log.log_batch({"epoch": epoch, "batch": 5, "batches": 10, "train_loss": 0.5, "lr": 0.1},
                      step=(epoch - 1) * 10 + 5)
        log.log_epoch(record(epoch, 0.9))
    log.close()
    new_process()
    log = metrics.MetricsLog(tmp_path, enabled=True, epochs_done=2, batches_per_epoch=10)
    log.log_batch({"epoch": 3, "batch": 5, "batches": 10, "train_loss": 0.25, "lr": 0.1},
                  step=25)
    log.log_epoch(record(3, 0.95))
    log.close()
    assert scalar_steps(tmp_path / "tensorboard", "test_accuracy") == [
        (1, 0.9), (2, 0.9), (3, 0.95)]
    assert scalar_steps(tmp_path / "tensorboard", "batch/train_loss") == [
        (5, 0.5), (15, 0.5), (25, 0.25)]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(line["epoch"], line.get("batch")) for line in lines] == [
        (1, 5), (1, None), (2, 5), (2, None), (3, 5), (3, None)]


def test_every_line_has_its_time(tmp_path, new_process):
    new_process()
    log = metrics.MetricsLog(tmp_path, enabled=True)
    log.log_epoch(record(1, 0.9))
    log.close()
    stamp = json.loads((tmp_path / "metrics.jsonl").read_text())["time_utc"]
    written = datetime.datetime.fromisoformat(stamp)
    assert written.tzinfo == datetime.UTC
    assert abs((datetime.datetime.now(datetime.UTC) - written).total_seconds()) < 60
    assert metrics.format_batch({"epoch": 2, "batch": 30, "batches": 120, "train_loss": 0.41234}
                                ) == "epoch 2 [30/120 batches, 25%] loss 0.4123"


def test_disabled_log_writes_nothing(tmp_path):
    log = metrics.MetricsLog(tmp_path, enabled=False)
    log.log_epoch(record(1, 0.9))
    log.close()
    assert list(tmp_path.iterdir()) == []


RT = SimpleNamespace(size=2, controller="gloo", device="cpu", is_root=True, network="eth0")
CONFIG = parse_args(["--epochs", "3"])


def ranks(digests):
    return [{"rank": i, "host": h, "local_rank": 0, "images": 100, "step_time_s": t,
             "train_time_s": t + 0.5, "images_per_sec": 100 / t, "digest": d}
            for i, (h, t, d) in enumerate(zip(["a", "b"], [1.0, 2.0], digests, strict=True))]


def test_summary_totals_are_sums_over_ranks():
    summary = metrics.build_summary("pytorch", "m", RT, ranks(["x", "x"]),
                                    {"test_loss": 0.1, "test_accuracy": 0.9}, 3, 0, 5.0,
                                    CONFIG)
    assert summary["images_per_sec"] == 150.0
    # The slowest rank's times: the run is as slow as its slowest rank.
    assert summary["step_time_s"] == 2.0 and summary["train_time_s"] == 2.5
    assert summary["hosts"] == {"a": 1, "b": 1}
    assert summary["controller"] == "gloo" and summary["network_interface"] == "eth0"
    assert summary["weights_identical"] and "digest" not in summary["ranks"][0]
    # The run's options, as JSON values.
    assert summary["options"]["epochs"] == 3 and summary["options"]["data_dir"] == "data"
    json.dumps(summary)


def test_ranks_with_different_weights_fail_the_run(tmp_path):
    summary = metrics.build_summary("pytorch", "m", RT, ranks(["x", "y"]),
                                    {"test_loss": 0.1, "test_accuracy": 0.9}, 3, 0, 5.0,
                                    CONFIG)
    assert summary["weights_identical"] is False
    with pytest.raises(RunFailed, match="ranks ended with different weights"):
        metrics.finish_run(RT, tmp_path, summary)
    assert json.loads((tmp_path / "summary.json").read_text())["weights_identical"] is False


@pytest.mark.parametrize("resume, exists, said", [
    (True, False, "note: --resume found no checkpoint at {path}; starting from epoch 1\n"),
    (False, True, "note: starting over; {path} will be replaced (pass --resume to continue "
                  "from it)\n"),
    (True, True, ""),  # resumed: the start line says after which epoch
    (False, False, ""),
])
def test_a_checkpoint_used_otherwise_than_the_command_suggests_is_one_note(
        resume, exists, said, tmp_path, capsys):
    path = tmp_path / "checkpoint.pt"
    if exists:
        path.write_bytes(b"")
    metrics.note_checkpoint(SimpleNamespace(is_root=True), path, resume)
    metrics.note_checkpoint(SimpleNamespace(is_root=False), path, resume)  # rank 0 speaks
    assert capsys.readouterr().out == said.format(path=path)


def test_the_first_line_says_what_trains_where_from_one_record(capsys):
    run = metrics.Announcement(
        framework="pytorch", model="mnist_cnn", train_images=60000, test_images=10000, lr=0.01,
        lr_scale=2, epochs_done=1, choices="batch 64", versions={"horovod": "0.28.1",
                                                                 "python": "3.11", "cuda": None},
        settings="OMP_NUM_THREADS=1")
    metrics.announce(SimpleNamespace(**{**vars(RT), "threads": 1}), run)
    metrics.announce(SimpleNamespace(**{**vars(RT), "is_root": False}), run)  # rank 0 speaks
    assert capsys.readouterr().out == (
        "training pytorch mnist_cnn on 60000 images, testing on 10000, 2 ranks (gloo), cpu, "
        "1 threads per rank, network eth0, lr 0.01 x 2, batch 64, resuming after epoch 1; "
        "Horovod 0.28.1; set: OMP_NUM_THREADS=1\n")


def test_the_closing_lines_split_wall_time_as_help_defines_it():
    summary = metrics.build_summary("pytorch", "m", RT, ranks(["x", "x"]),
                                    {"test_loss": 0.1, "test_accuracy": 0.9}, 3, 0, 5.0,
                                    CONFIG)
    assert ("wall time 5.0 s: 2.5 s training (2.0 s of it in steps), 2.5 s start-up and "
            "summary") in metrics.format_summary(summary)


def test_trimming_the_events_loads_no_framework(tmp_path):
    """An MXNet process that imports TensorFlow (TensorBoard's own event
    reader does) crashes: a resumed run reads its event files without."""
    code = f"""
import sys
from horovod_train.core import metrics
log = metrics.MetricsLog({str(tmp_path)!r}, enabled=True)
for epoch in (1, 2):
    log.log_epoch({{"epoch": epoch, "test_accuracy": 0.5}})
log.close()
metrics.MetricsLog({str(tmp_path)!r}, enabled=True, epochs_done=1).close()
print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "torch", "mxnet")))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[]\n"
    assert scalar_steps(tmp_path / "tensorboard", "test_accuracy") == [(1, 0.5)]

"""Rank 0's reports: JSON lines and TensorBoard scalars that TensorBoard
itself reads back, and a summary whose totals are the sums of the ranks."""

import json
from types import SimpleNamespace

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from horovod_train.core import metrics
from horovod_train.core.errors import RunFailed, UserError
from horovod_train.pytorch_mnist import parse_args


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


def test_a_full_disk_under_the_metrics_line_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "metrics.jsonl").symlink_to("/dev/full")  # every write: no space left
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


def test_a_fresh_run_starts_a_new_log(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1}\n')
    log = metrics.MetricsLog(tmp_path, enabled=True, epochs_done=0)
    log.close()
    assert (tmp_path / "metrics.jsonl").read_text() == ""


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


def test_the_closing_lines_split_wall_time_as_help_defines_it():
    summary = metrics.build_summary("pytorch", "m", RT, ranks(["x", "x"]),
                                    {"test_loss": 0.1, "test_accuracy": 0.9}, 3, 0, 5.0,
                                    CONFIG)
    assert ("wall time 5.0 s: 2.5 s training (2.0 s of it in steps), 2.5 s start-up and "
            "summary") in metrics.format_summary(summary)

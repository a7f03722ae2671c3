"""A run's output directories: both judged before either is made, and an
unusable one named in the error."""

import pytest

from horovod_train.core import outputs
from horovod_train.core.errors import UserError


@pytest.mark.parametrize("blocked", ["log", "checkpoint"])
def test_an_unusable_output_dir_is_named_and_nothing_is_made(tmp_path, blocked):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    log_dir = (blocker if blocked == "log" else tmp_path) / "run"
    checkpoint_dir = (blocker if blocked == "checkpoint" else tmp_path / "run") / "checkpoints"
    with pytest.raises(UserError) as err:
        outputs.prepare_output_dirs(log_dir, checkpoint_dir)
    wanted = log_dir if blocked == "log" else checkpoint_dir
    assert str(err.value) == f"cannot create {wanted}: {blocker} is not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the other one not made


def test_output_dirs_are_made_when_they_can_be(tmp_path):
    outputs.prepare_output_dirs(tmp_path / "run", tmp_path / "run" / "checkpoints")
    assert (tmp_path / "run" / "checkpoints").is_dir()

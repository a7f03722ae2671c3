"""The trainers' options, read once into a frozen run configuration."""

import dataclasses
import json

import pytest

from horovod_train import distributed, mxnet_mnist, pytorch_mnist, tensorflow2_mnist
from horovod_train.options import RunConfig


@pytest.mark.parametrize("entry", [pytorch_mnist, tensorflow2_mnist, mxnet_mnist])
def test_every_trainer_reads_its_options_into_one_frozen_config(entry):
    config = entry.parse_args(["--epochs", "3", "--log-dir", "out"])
    assert isinstance(config, RunConfig) and config.epochs == 3
    # Defaults that depend on other options are filled in once, here.
    assert config.checkpoint_dir == config.log_dir / "checkpoints"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epochs = 4


@pytest.mark.parametrize("entry", [pytorch_mnist, tensorflow2_mnist, mxnet_mnist])
def test_check_options_prints_the_configuration_as_json_and_starts_nothing(entry, capsys):
    with pytest.raises(SystemExit) as done:
        entry.parse_args(["--epochs", "3", "--check-options"])
    assert done.value.code == 0
    record = json.loads(capsys.readouterr().out)
    assert record["epochs"] == 3 and "check_options" not in record


def test_the_summary_record_of_a_config_is_json_values():
    record = pytorch_mnist.parse_args(["--data-dir", "/data/mnist"]).as_record()
    assert record["data_dir"] == "/data/mnist" and record["target_accuracy"] is None


@pytest.mark.parametrize("entry", [pytorch_mnist, tensorflow2_mnist, mxnet_mnist])
def test_every_trainers_help_names_the_settings_each_rank_makes(entry, capsys):
    """Each rank changes its process before Horovod starts: --help says how,
    and with which variable the user undoes it."""
    with pytest.raises(SystemExit):
        entry.parse_args(["--help"])
    help_text = capsys.readouterr().out
    settings = {**distributed.RANK_MPI_SETTINGS, **distributed.CPU_RANK_HOROVOD_SETTINGS}
    for name, value in settings.items():
        assert f"{name}={value}" in help_text, name

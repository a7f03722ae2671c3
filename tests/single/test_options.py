"""The trainers' options, read once into a frozen run configuration."""

import dataclasses
import json

import pytest

from horovod_train.core import runtime
from horovod_train.core.config import Placement, RunConfig, validate
from horovod_train.mxnet import options as mxnet_options
from horovod_train.tensorflow import options as tensorflow_options
from horovod_train.torch import options as torch_options


@pytest.mark.parametrize("entry", [torch_options, tensorflow_options, mxnet_options])
def test_every_trainer_reads_its_options_into_one_frozen_config(entry):
    config = entry.parse_args(["--epochs", "3", "--log-dir", "out"])
    assert isinstance(config, RunConfig) and config.schedule.epochs == 3
    # Defaults that depend on other options are filled in once, here.
    assert config.outputs.checkpoint_dir == config.outputs.log_dir / "checkpoints"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.schedule.epochs = 4


@pytest.mark.parametrize("entry", [torch_options, tensorflow_options, mxnet_options])
def test_check_options_prints_the_configuration_as_json_and_starts_nothing(entry, capsys):
    with pytest.raises(SystemExit) as done:
        entry.parse_args(["--epochs", "3", "--check-options"])
    assert done.value.code == 0
    record = json.loads(capsys.readouterr().out)
    assert record["epochs"] == 3 and "check_options" not in record


def test_the_summary_record_of_a_config_is_json_values():
    record = torch_options.parse_args(["--data-dir", "/data/mnist"]).as_record()
    assert record["data_dir"] == "/data/mnist" and record["target_accuracy"] is None


@pytest.mark.parametrize("entry", [torch_options, tensorflow_options, mxnet_options])
def test_every_trainers_help_names_the_settings_each_rank_makes(entry, capsys):
    """Each rank changes its process before Horovod starts: --help says how,
    and with which variable the user undoes it."""
    with pytest.raises(SystemExit):
        entry.parse_args(["--help"])
    help_text = capsys.readouterr().out
    settings = {**runtime.RANK_MPI_SETTINGS, **runtime.CPU_RANK_HOROVOD_SETTINGS}
    for name, value in settings.items():
        assert f"{name}={value}" in help_text, name


@pytest.mark.parametrize("found, set_by", [(None, "project"), ("1", "project"), ("0", "user")],
                         ids=["unset", "the project's file", "the user's"])
def test_a_rank_setting_found_at_the_projects_value_is_the_projects(found, set_by, monkeypatch):
    """scripts/launch.sh and the Slurm job hand every rank the project's Open
    MPI file: its value is not the user's."""
    monkeypatch.setattr(runtime, "APPLIED", {})
    monkeypatch.setenv("OMPI_MCA_mpi_yield_when_idle", found or "")  # restored afterwards
    if found is None:
        monkeypatch.delenv("OMPI_MCA_mpi_yield_when_idle")
    runtime.use_rank_mpi_settings()
    (recorded,) = runtime.APPLIED.values()
    assert recorded == {"value": found or "1", "set_by": set_by}


@pytest.mark.parametrize("entry, framework_options", [
    (torch_options, True), (tensorflow_options, False), (mxnet_options, False)])
def test_a_run_records_only_its_own_frameworks_options(entry, framework_options):
    record = entry.parse_args([]).as_record()
    pytorch_only = {"model", "memory_format", "label_smoothing", "backward_passes_per_step",
                    "sync_bn", "data_pipeline", "num_workers", "preset", "elastic",
                    "commit_every", "benchmark_steps", "warmup_steps", "synthetic", "image_size"}
    assert (pytorch_only <= record.keys()) is framework_options
    assert framework_options or not pytorch_only & record.keys()
    # Every option of the trainer's --help is in its record, and nothing else;
    # upstream's names for our options are recorded as ours (--amp fp16).
    parser_options = {action.dest for action in entry.build_parser()._actions
                      if action.dest not in ("help", "check_options", "use_mixed_precision",
                                             "dtype")}
    assert set(record) == parser_options


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "argument --epochs: 0 must be >= 1"),
    (["--batch-size", "ten"], "argument --batch-size: 'ten' is not an integer"),
    (["--lr", "-1"], "argument --lr: -1 must be > 0.0"),
    (["--model", "resnet"], "argument --model: invalid choice: 'resnet'"),
    (["--data-pipeline", "disk"], "argument --data-pipeline: invalid choice: 'disk'"),
    (["--memory-format", "nhwc"], "argument --memory-format: invalid choice: 'nhwc'"),
    (["--label-smoothing", "1"], "argument --label-smoothing: 1 must be < 1"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["--benchmark-steps", "0"], "argument --benchmark-steps: 0 must be >= 1"),
])
def test_a_bad_option_is_one_line_naming_it_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as ended:
        torch_options.parse_args(argv)
    assert ended.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith("pytorch_mnist.py: error: ") and message in said
    assert said.count("\n") == 1, said


@pytest.mark.parametrize("argv, message", [
    (["--elastic", "--resume", "--sync-bn"], "--elastic does not combine with --sync-bn"),
    (["--elastic", "--benchmark-steps", "3"], "--elastic does not combine with --benchmark-steps"),
    (["--elastic", "--data-pipeline", "loader"],
     "--elastic does not combine with --data-pipeline loader"),
    (["--benchmark-steps", "3", "--resume"], "--benchmark-steps does not combine with --resume"),
    (["--benchmark-steps", "3", "--use-adasum", "--backward-passes-per-step", "2"],
     "--benchmark-steps does not combine with --use-adasum, --backward-passes-per-step"),
    (["--benchmark-steps", "3", "--preset", "fast-mnist"],
     "--benchmark-steps does not combine with --target-accuracy, --label-smoothing"),
    (["--synthetic"], "--synthetic and the resnet models are for --benchmark-steps runs only"),
    (["--model", "resnet18", "--benchmark-steps", "3"],
     "--model resnet18 takes synthetic images only: add --synthetic"),
])
def test_every_clash_between_options_is_one_line_and_exit_2(argv, message, capsys):
    """config.validate, the one place options are checked against each other:
    what a kind of run would otherwise ignore without a word is refused."""
    with pytest.raises(SystemExit) as ended:
        torch_options.parse_args(argv)
    assert ended.value.code == 2
    assert capsys.readouterr().err == f"pytorch_mnist.py: error: {message}\n"


@pytest.mark.parametrize("argv", [
    ["--elastic", "--label-smoothing", "0.1", "--commit-every", "3"],
    ["--benchmark-steps", "3", "--model", "resnet18", "--synthetic", "--data-pipeline", "loader"],
    ["--preset", "fast-mnist"],
])
def test_options_that_go_together_pass(argv):
    assert validate(torch_options.parse_args(argv)) is None


def test_mxnet_refuses_adasum_as_it_parses(capsys):
    with pytest.raises(SystemExit) as ended:
        mxnet_options.parse_args(["--use-adasum"])
    assert ended.value.code == 2
    assert "Horovod's MXNet DistributedTrainer has no Adasum" in capsys.readouterr().err


@pytest.mark.parametrize("entry, argv, placement, message", [
    (torch_options, ["--use-adasum"], Placement("gloo", on_gpu=False),
     "--use-adasum needs the MPI controller (horovodrun --mpi): Horovod implements Adasum "
     "over MPI only (pytorch)"),
    (tensorflow_options, ["--use-adasum"], Placement("gloo", on_gpu=True),
     "--use-adasum needs the MPI controller (horovodrun --mpi): Horovod implements Adasum "
     "over MPI only (tensorflow)"),
    (torch_options, ["--sync-bn"], Placement("mpi", on_gpu=False),
     "--sync-bn needs GPUs: Horovod's SyncBatchNorm works on CUDA tensors only"),
    (torch_options, ["--use-adasum", "--sync-bn"], Placement("mpi", on_gpu=True),
     None),
])
def test_options_that_depend_on_where_the_ranks_run_are_checked_with_the_placement(
        entry, argv, placement, message):
    """The same validate, once Horovod has started: the controller and the
    device are known then, not as the options are parsed."""
    config = entry.parse_args(argv)
    assert validate(config, placement) == message


def test_amp_auto_is_off_on_the_cpu_and_bf16_runs_there_and_fp16_is_refused():
    import torch

    from horovod_train.torch.precision import amp_name, amp_settings

    cpu = torch.device("cpu")
    assert amp_settings(cpu, "auto") == (None, False) and amp_name(None) == "off"
    assert amp_settings(cpu, "bf16") == (torch.bfloat16, False)
    assert amp_settings(cpu, "off") == (None, False)
    config = torch_options.parse_args(["--amp", "fp16"])
    assert validate(config, Placement("gloo", on_gpu=False)) == (
        "--amp fp16 needs a GPU (its loss scaling is CUDA's): use bf16 or off on the CPU")
    assert validate(config, Placement("gloo", on_gpu=True)) is None
    assert config.as_record()["amp"] == "fp16"

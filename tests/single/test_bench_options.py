"""The measuring commands' options, in process: a bad one is one line and
exit 2 (each command runs as users type it in tests/parallel)."""

import pytest

from benchmarks import trainer_throughput


def test_trainer_throughput_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as ended:
        trainer_throughput.parse_args(["--help"])
    assert ended.value.code == 0
    shown = capsys.readouterr().out
    for option in ("--data-dir", "--samples", "--model", "--batch-size", "--steps",
                   "--repeats", "--warmup-steps", "--threads", "--json"):
        assert option in shown, option


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "argument --steps: 0 must be >= 1"),
    (["--repeats", "two"], "argument --repeats: 'two' is not an integer"),
    (["--model", "resnet50"], "argument --model: invalid choice: 'resnet50'"),
    (["--samples", "10", "--batch-size", "64"], "--samples 10 is fewer than one batch of 64"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_trainer_throughput_bad_options_are_one_error_line(args, message, capsys):
    with pytest.raises(SystemExit) as ended:
        trainer_throughput.parse_args(args)
    assert ended.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith(f"trainer_throughput.py: error: {message}") and said.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (["--phases", "again"], "--phases: again and second time what follows cold; add cold"),
    (["--phases", "second,cold"], "--phases: give them in the order cold, again, second"),
    (["--phases", "warm"], "--phases takes cold, again, second, cold-demo; got warm"),
    (["--revs", ","], "--revs is empty"),
])
def test_setup_times_bad_options_are_one_error_line(args, message, capsys):
    from benchmarks import setup_times

    with pytest.raises(SystemExit) as ended:
        setup_times.parse_args(args)
    assert ended.value.code == 2
    said = capsys.readouterr().err
    assert message in said and said.count("\n") == 1


def test_setup_times_names_a_rev_that_is_no_commit():
    from benchmarks import setup_times
    from horovod_train.core.errors import UserError

    with pytest.raises(UserError, match="--revs: no-such-rev is no commit"):
        setup_times.parse_args(["--revs", "HEAD,no-such-rev"])


def test_setup_times_table_gives_each_phase_its_ratio_to_the_first_commit():
    from benchmarks import setup_times

    results = {"a" * 40: {"cold": {"seconds": 400.0}, "second": {"seconds": 200.0}},
               "b" * 40: {"cold": {"seconds": 300.0}, "second": {"seconds": 20.0}}}
    table = setup_times.table(["old", "new"], list(results), results)
    assert "| cold | 400 s | 300 s (0.75x) |" in table
    assert "| second | 200 s | 20 s (0.10x) |" in table


@pytest.fixture
def two_venvs(tmp_path):
    """Two folders that look like venvs to epoch_times' checks."""
    for name in ("old", "new"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "horovodrun").touch()
    return tmp_path


@pytest.mark.parametrize("venvs, extra, message", [
    ("{d}/old,{d}/none", [], "--venvs: {d}/none has no bin/horovodrun"),
    ("{d}/old,{d}/old", [], "--venvs names one environment twice"),
    ("{d}/old,{d}/new@NOVALUE", [], "--venvs: {d}/new@NOVALUE: settings are @NAME=VALUE"),
    ("{d}/old,{d}/new", ["--frameworks", "jax"], "--frameworks takes pytorch, tensorflow, "
                                                 "mxnet; got jax"),
    ("{d}/old,{d}/new", ["--epochs", "1"], "--epochs takes 2 or more"),
])
def test_epoch_times_bad_options_are_one_error_line(two_venvs, venvs, extra, message, capsys):
    from benchmarks import epoch_times
    with pytest.raises(SystemExit) as ended:
        epoch_times.parse_args(["--venvs", venvs.format(d=two_venvs), "--data-dir",
                                str(two_venvs), *extra])
    assert ended.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and message.format(d=two_venvs) in said[0], said


def test_epoch_times_labels_a_venv_by_its_folder_and_settings(two_venvs):
    from benchmarks import epoch_times
    args = epoch_times.parse_args(["--venvs", f"{two_venvs}/old,{two_venvs}/old@A=1@B=2",
                                   "--data-dir", str(two_venvs), "--", "--batch-size", "32"])
    assert [epoch_times.label(v) for v in args.venvs] == ["old", "old@A=1@B=2"]
    assert args.trainer_args == ["--batch-size", "32"]
    results = {"tensorflow": {"old": {"version": "2.21.0", "epoch_s": 1.2, "test_accuracy": 0.985},
                              "old@A=1@B=2": {"version": "2.21.0", "epoch_s": 0.9,
                                              "test_accuracy": 0.985}}}
    table = epoch_times.table(args, results)
    assert "| tensorflow | old@A=1@B=2 | 2.21.0 | 0.90 | 0.75 | 98.50% |" in table

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

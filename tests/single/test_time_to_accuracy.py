"""benchmarks/time_to_accuracy.py in a short mode (a low target, one epoch),
the trainer's --preset and --target-accuracy it relies on, and bad input
answered with one error line."""


from horovod_train.torch.options import parse_args
from horovod_train.torch.presets import PRESETS


def test_preset_sets_defaults_and_options_given_win():
    record = parse_args(["--preset", "fast-mnist"]).as_record()
    for key, value in PRESETS["fast-mnist"].items():
        assert record[key] == value, key
    assert parse_args(["--preset", "fast-mnist", "--epochs", "7"]).schedule.epochs == 7
    plain = parse_args([]).schedule
    assert plain.target_accuracy is None and plain.epochs == 5

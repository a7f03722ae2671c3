"""Each flag of Horovod 0.28.1's MNIST examples (tests/upstream_flags.py)
means the same to our trainers: parsed alone, it sets the option that holds
that meaning. Run for real: tests/parallel/test_upstream_flags_run.py."""

import operator

import pytest
import upstream_flags

from horovod_train import train
from horovod_train.mxnet import options as mxnet_options
from horovod_train.tensorflow.options import upstream_launch_words
from horovod_train.torch import options as torch_options


@pytest.mark.parametrize("entry, flag", [
    *[(torch_options, flag) for flag in upstream_flags.PYTORCH],
    *[(mxnet_options, flag) for flag in upstream_flags.MXNET],
], ids=lambda item: getattr(item, "flag", None) or item.__name__.split(".")[-2])
def test_each_upstream_flag_holds_its_meaning(entry, flag):
    given = upstream_flags.argv([flag])
    if flag.flag in ("--hosts", "--communication"):
        given += ["--num-proc", "2"]  # they say where --num-proc's ranks go
    config = entry.parse_args(given)
    if flag.ours is not None:
        assert operator.attrgetter(flag.ours)(config) == flag.expected


def test_the_tensorflow2_examples_three_words_hold_our_launch_options():
    """`tensorflow2_mnist.py 2 localhost:2 gloo`: horovod.run's np, hosts and
    controller, as our --num-proc, --hosts and --communication; options of
    ours may follow."""
    given = upstream_launch_words(upstream_flags.words(upstream_flags.TENSORFLOW2_WORDS)
                                  + ["--epochs", "1"])
    config = train.parse_args("tensorflow", given)
    for flag in upstream_flags.TENSORFLOW2_WORDS:
        assert operator.attrgetter(flag.ours)(config) == flag.expected
    assert config.schedule.epochs == 1
    assert upstream_launch_words(["--epochs", "1", "--lr", "0.1"]) == ["--epochs", "1", "--lr",
                                                                       "0.1"]


def test_upstream_flags_that_mean_something_here_are_refused_in_one_line(capsys):
    for entry, argv, message in [
        (mxnet_options, ["--dtype", "float16"], "--dtype float16: this MXNet trains in float32 "
                                              "only"),
        (torch_options, ["--use-mixed-precision", "--amp", "bf16"],
         "--use-mixed-precision is --amp fp16: it does not combine with --amp bf16"),
        (torch_options, ["--communication", "mpi"], "--hosts and --communication say where "
                                                    "--num-proc starts its ranks"),
        (torch_options, ["--use-adasum", "--gradient-predivide-factor", "2"],
         "--gradient-predivide-factor scales Horovod's averaging: it does not combine with "
         "--use-adasum"),
        (torch_options, ["--elastic", "--num-proc", "2"], "--elastic does not combine with "
                                                          "--num-proc"),
    ]:
        with pytest.raises(SystemExit) as ended:
            entry.parse_args(argv)
        assert ended.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert message in line


def test_a_rank_of_horovodrun_does_not_start_ranks_of_its_own(monkeypatch, capsys):
    monkeypatch.setenv("HOROVOD_RANK", "0")
    with pytest.raises(SystemExit):
        torch_options.parse_args(["--num-proc", "2"])
    assert "--num-proc starts the ranks itself: run the command without horovodrun" in \
        capsys.readouterr().err


def test_the_ranks_run_the_command_line_less_the_launch_options():
    from horovod_train.launch.python_launcher import rank_argv

    assert rank_argv(["--num-proc", "2", "--epochs", "1", "--hosts=a:1,b:1",
                      "--communication", "mpi", "--lr", "0.1"]) == ["--epochs", "1", "--lr",
                                                                    "0.1"]

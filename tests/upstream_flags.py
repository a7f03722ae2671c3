"""The flags of Horovod 0.28.1's own MNIST examples
(examples/pytorch/pytorch_mnist.py, examples/mxnet/mxnet_mnist.py) and the
words of its TensorFlow 2 one (examples/tensorflow2/tensorflow2_mnist.py),
as data: each with an example value, what it means upstream (its help), and where our
trainer's configuration holds the same meaning, with the value it must
hold. tests/single/test_upstream_flags.py checks each flag's meaning;
tests/parallel/test_upstream_flags_run.py runs them for real."""

from pathlib import Path
from typing import NamedTuple


class Flag(NamedTuple):
    flag: str
    value: str | None  # None: a switch
    upstream_meaning: str
    ours: str | None  # section.field of the run configuration; None: nothing to hold
    expected: object


# Both examples' options for starting their own ranks.
LAUNCH = [
    Flag("--num-proc", "2", "ranks to start when not run through horovodrun (horovod.run)",
         "launch.num_proc", 2),
    Flag("--hosts", "localhost:2", "hosts to run on in notation: hostname:slots[,host2:slots"
         "[,...]]", "launch.hosts", "localhost:2"),
    Flag("--communication", "gloo", "collaborative communication to use: gloo, mpi",
         "launch.communication", "gloo"),
]

PYTORCH = [
    Flag("--batch-size", "32", "input batch size for training", "schedule.batch_size", 32),
    Flag("--test-batch-size", "500", "input batch size for testing",
         "schedule.test_batch_size", 500),
    Flag("--epochs", "1", "number of epochs to train", "schedule.epochs", 1),
    Flag("--lr", "0.01", "learning rate (of one worker, scaled by the ranks)", "schedule.lr",
         0.01),
    Flag("--momentum", "0.5", "SGD momentum", "schedule.momentum", 0.5),
    Flag("--no-cuda", None, "disables CUDA training", "device.no_cuda", True),
    Flag("--seed", "7", "random seed", "schedule.seed", 7),
    Flag("--log-interval", "10", "how many batches to wait before logging training status",
         "outputs.log_interval", 10),
    Flag("--fp16-allreduce", None, "use fp16 compression during allreduce",
         "horovod.fp16_allreduce", True),
    Flag("--use-mixed-precision", None, "use mixed precision for training (autocast to "
         "float16, GradScaler; CUDA only)", "framework.torch.amp", "fp16"),
    Flag("--use-adasum", None, "use adasum algorithm to do reduction", "horovod.use_adasum",
         True),
    Flag("--gradient-predivide-factor", "2.0", "apply gradient predivide factor in optimizer",
         "horovod.gradient_predivide_factor", 2.0),
    Flag("--data-dir", "mnist-data", "location of the training dataset in the local "
         "filesystem (will be downloaded if needed)", "data.data_dir", Path("mnist-data")),
    *LAUNCH,
]

MXNET = [
    Flag("--batch-size", "64", "training batch size", "schedule.batch_size", 64),
    Flag("--dtype", "float32", "training data type", None, None),
    Flag("--epochs", "1", "number of training epochs", "schedule.epochs", 1),
    Flag("--lr", "0.01", "learning rate (of one worker, scaled by the ranks)", "schedule.lr",
         0.01),
    Flag("--momentum", "0.9", "SGD momentum", "schedule.momentum", 0.9),
    Flag("--no-cuda", None, "disable training on GPU", "device.no_cuda", True),
    Flag("--fp16-allreduce", None, "use fp16 compression during allreduce",
         "horovod.fp16_allreduce", True),
    Flag("--gradient-predivide-factor", "2.0", "apply gradient predivide factor in optimizer",
         "horovod.gradient_predivide_factor", 2.0),
    *LAUNCH,
]


# Horovod's TensorFlow 2 example has no flags: given exactly three words,
# `NUM_PROC HOSTS COMMUNICATION`, it starts its ranks through horovod.run
# (np, hosts, use_gloo/use_mpi). Each word as the flag of ours that holds it.
TENSORFLOW2_WORDS = [
    Flag("--num-proc", "2", "np: ranks horovod.run starts", "launch.num_proc", 2),
    Flag("--hosts", "localhost:2", "hosts: hostname:slots[,host2:slots[,...]]",
         "launch.hosts", "localhost:2"),
    Flag("--communication", "gloo", "use_gloo if gloo, use_mpi if mpi",
         "launch.communication", "gloo"),
]


def words(flags: list[Flag]) -> list[str]:
    """The values alone, as the TensorFlow 2 example's command line."""
    return [flag.value for flag in flags]


def argv(flags: list[Flag], leave_out: tuple[str, ...] = ()) -> list[str]:
    """The flags as one command line, less those left out."""
    line = []
    for flag in flags:
        if flag.flag not in leave_out:
            line += [flag.flag] + ([flag.value] if flag.value is not None else [])
    return line

"""The baseline: the same timed steps as `pytorch_mnist.py --benchmark-steps`,
with PyTorch DistributedDataParallel under torchrun instead of Horovod, which
is what users would pick instead of Horovod.

The command; its code is horovod_train/bench/ddp_benchmark.py."""

from horovod_train.bench.ddp_benchmark import cli

if __name__ == "__main__":
    cli()

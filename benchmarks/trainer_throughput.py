"""Training throughput of our PyTorch trainer against a reference that
behaves like Horovod's own examples/pytorch/pytorch_mnist.py, side by side in
one process: the same device, network, batch size and data.

The command; its code is horovod_train/bench/trainer_throughput.py."""

from horovod_train.bench.trainer_throughput import cli

if __name__ == "__main__":
    cli()

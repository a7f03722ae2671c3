"""Allreduce micro-benchmark: bus bandwidth against message size, the way
nccl-tests reports it, for Horovod, torch.distributed and plain MPI side by
side on the same processes and hosts.

The command; its code is horovod_train/bench/allreduce_bench.py."""

from horovod_train.bench.allreduce_bench import cli

if __name__ == "__main__":
    cli()

"""Throughput of one workload on a matrix of layouts, with Horovod and with
torchrun + DDP side by side. Run it through benchmarks/run_matrix.sh;
horovod_train/bench/scaling_tables.py turns the runs into results.json,
scaling.csv, scaling.md and scaling.png.

The command; its code is horovod_train/bench/matrix.py."""

from horovod_train.bench.matrix import cli

if __name__ == "__main__":
    cli()

"""Predict throughput and scaling efficiency for layouts larger than the ones
measured, from a results.json written by benchmarks/run_matrix.sh.

The command; its code is horovod_train/bench/predict_scaling.py."""

from horovod_train.bench.predict_scaling import cli

if __name__ == "__main__":
    cli()

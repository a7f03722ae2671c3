"""Train MNIST with PyTorch and Horovod.

    horovodrun -np 4 -H a:2,b:2 python horovod_train/pytorch_mnist.py --data-dir data

Every rank runs this file; rank 0 prints, writes metrics, TensorBoard logs,
checkpoints and summary.json under --log-dir. With --benchmark-steps it
times that many steps instead (benchmarks/run_matrix.sh runs it so). The
options: torch/options.py; the run: train.py.
"""

if not __package__:
    import checkout_first  # noqa: F401  (run by path: the package from the checkout)

from horovod_train import train  # noqa: E402


def cli() -> None:
    train.cli("pytorch")


if __name__ == "__main__":
    cli()

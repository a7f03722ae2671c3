# horovod-train: answers --check-options
"""Train MNIST with PyTorch and Horovod.

    horovodrun -np 4 -H a:2,b:2 python horovod_train/pytorch_mnist.py --data-dir data

Every rank runs this file; rank 0 prints, writes metrics, TensorBoard logs,
checkpoints and summary.json under --log-dir. With --benchmark-steps it
times that many steps instead (benchmarks/run_matrix.sh runs it so). The
options: torch/options.py; the run: train.py.
"""

if not __package__:  # run by path: the package from the checkout (checkout_first.py)
    import contextlib

    # Not found in a rank horovod.run spawns: it inherits its parent's path, checkout first.
    with contextlib.suppress(ModuleNotFoundError):
        import checkout_first  # noqa: F401

from horovod_train import train  # noqa: E402


def cli() -> None:
    train.cli("pytorch")


if __name__ == "__main__":
    cli()

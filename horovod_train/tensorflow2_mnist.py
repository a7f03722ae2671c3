# horovod-train: answers --check-options
"""Train MNIST with TensorFlow 2 and Horovod.

    horovodrun -np 4 -H a:2,b:2 python horovod_train/tensorflow2_mnist.py --data-dir data
    python horovod_train/tensorflow2_mnist.py 2 localhost:2 gloo   # as Horovod's example

Same options and outputs as pytorch_mnist.py where they apply; rank 0 writes
metrics, TensorBoard logs, checkpoints and summary.json under --log-dir.
The options: tensorflow/options.py; the run: train.py.
"""

if not __package__:  # run by path: the package from the checkout (checkout_first.py)
    import contextlib

    # Not found in a rank horovod.run spawns: it inherits its parent's path, checkout first.
    with contextlib.suppress(ModuleNotFoundError):
        import checkout_first  # noqa: F401

from horovod_train import train  # noqa: E402


def cli() -> None:
    train.cli("tensorflow")


if __name__ == "__main__":
    cli()

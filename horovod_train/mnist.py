"""Fetch, check or prepare MNIST in the torchvision layout (core/mnist.py):

    python -m horovod_train mnist download --data-dir data
    python -m horovod_train mnist subset --source DIR_WITH_t10k_FILES --data-dir data
    python -m horovod_train mnist check --data-dir data

(`python -m horovod_train.mnist ...`, this module run itself, is the same.)
"""

from horovod_train.core.mnist import cli

if __name__ == "__main__":
    cli()

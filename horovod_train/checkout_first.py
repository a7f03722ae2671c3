"""Imported by bare name by the trainers' files when they run by path
(`python horovod_train/pytorch_mnist.py`, as Horovod's docs run examples):
Python then puts horovod_train/ first on sys.path, whose torch/,
tensorflow/ and mxnet/ would shadow the frameworks themselves; the checkout
goes there instead, and the package is imported from it."""

import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

"""The lab: the code that measures the product, apart from it. Each module
with a `cli()` is a command, run by path (`python benchmarks/NAME.py`, with
the project's environment: the checkout's .venv, or the image, where the
checkout is on PYTHONPATH) or as `python -m benchmarks.NAME`;
run_matrix.sh starts matrix.py. It imports horovod_train; horovod_train
never imports it. The timed steps of the trainer's --benchmark-steps mode
are the product's (horovod_train/torch/timed_steps.py), shared with the DDP
baseline here."""

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent  # benchmarks/ sits at the checkout's root

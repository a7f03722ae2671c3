"""Time to accuracy: how long the PyTorch trainer takes to reach a test
accuracy (98% by default) on the real digits, with a named preset of the
trainer (fast-mnist by default, the fastest configuration found).

The command; its code is horovod_train/bench/time_to_accuracy.py."""

from horovod_train.bench.time_to_accuracy import cli

if __name__ == "__main__":
    cli()

"""Named configurations of the PyTorch trainer (`--preset NAME`): defaults
for several options at once; options given on the command line still win."""

PRESETS = {
    # The fastest way found to 98% test accuracy on the 8,000 + 2,000 real
    # digits on a 2-core CPU (benchmarks/time_to_accuracy.py measures it):
    # the data on the device, a two-epoch cosine schedule with a short
    # warm-up, stopping as soon as an epoch's evaluation reaches 98%. One
    # epoch ends at 97.6-98.1% whatever the batch size and rate tried;
    # batches of 128 or more miss 98% in two epochs; 32 is slower per image
    # and still needs the second epoch.
    "fast-mnist": {
        "model": "mnist_cnn",
        "data_pipeline": "memory",
        "batch_size": 64,
        "lr": 0.05,
        "epochs": 2,
        "warmup_epochs": 0.2,
        "target_accuracy": 0.98,
    },
}


def describe_preset(name: str) -> str:
    """The preset as the options it stands for."""
    return " ".join(f"--{key.replace('_', '-')} {value}" for key, value in PRESETS[name].items())

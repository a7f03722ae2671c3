"""Named configurations of the PyTorch trainer (`--preset NAME`): defaults
for several options at once; options given on the command line still win."""

PRESETS = {
    # The fastest way found to 98% test accuracy on the 8,000 + 2,000 real
    # digits on a 2-core CPU (benchmarks/time_to_accuracy.py measures it):
    # the data on the device, two epochs whose rate rises linearly through
    # the first and falls along a cosine through the second, label
    # smoothing, and a stop as soon as an epoch's evaluation reaches 98%.
    # Label smoothing and the whole-epoch warm-up give two epochs the margin
    # over 98% whatever the seed; one epoch falls short whatever the batch
    # and rate. Test batches of 250: on CPUs larger ones evaluate slower
    # (their activations outgrow the caches). Figures: docs/benchmarks.md.
    "fast-mnist": {
        "model": "mnist_cnn",
        "data_pipeline": "memory",
        "batch_size": 64,
        "test_batch_size": 250,
        "lr": 0.05,
        "epochs": 2,
        "warmup_epochs": 1.0,
        "label_smoothing": 0.1,
        "target_accuracy": 0.98,
    },
}


def describe_preset(name: str) -> str:
    """The preset as the options it stands for."""
    return " ".join(f"--{key.replace('_', '-')} {value}" for key, value in PRESETS[name].items())

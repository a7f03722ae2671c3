"""The PyTorch trainer's networks and memory formats by name, without
torch: the options (and --help, and the matrix's planning) name them
without importing PyTorch; models.py builds them by these names."""

MODEL_NAMES = ("mnist_cnn", "horovod_example", "resnet18", "resnet50")
MNIST_MODELS = ("mnist_cnn", "horovod_example")  # the rest take 3-channel synthetic images
MEMORY_FORMAT_NAMES = ("channels_last", "contiguous")

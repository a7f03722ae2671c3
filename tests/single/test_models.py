"""models.py: the networks by name, built in the memory format asked for."""

import torch

from horovod_train.torch import model_names, models
from horovod_train.torch.models import build_model


def test_models_are_built_channels_last_unless_asked_otherwise():
    # The second convolution: with one input channel both layouts are the same.
    weight = build_model("mnist_cnn").features[4].weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    assert build_model("mnist_cnn", "contiguous").features[4].weight.is_contiguous()


def test_the_names_the_options_list_are_the_models_built():
    """model_names.py names them without torch (for --help and the options);
    models.py must build every one, in every memory format."""
    assert set(models.MODELS) == set(model_names.MODEL_NAMES)
    assert set(models.MEMORY_FORMATS) == set(model_names.MEMORY_FORMAT_NAMES)
    assert set(model_names.MNIST_MODELS) <= set(model_names.MODEL_NAMES)

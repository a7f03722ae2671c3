"""The networks, by name, so checkpoints and benchmarks can say which one."""

import torch
from torch import nn

from horovod_train.torch.model_names import MNIST_MODELS


class MnistCNN(nn.Module):
    """Two conv blocks with batch norm and a small classifier: small enough
    to train in seconds on CPUs, accurate enough to show a run learned
    (docs/benchmarks.md). Batch norm is what makes --sync-bn mean something."""

    def __init__(self, dropout: float = 0.25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=5, padding=2, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),  # 14x14
            nn.Conv2d(16, 32, kernel_size=5, padding=2, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),  # 7x7
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, 128),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(128, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class HorovodExampleNet(nn.Module):
    """The network of Horovod's own examples/pytorch/pytorch_mnist.py, kept
    for side-by-side comparisons."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(torch.max_pool2d(self.conv1(x), 2))
        x = torch.relu(torch.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = torch.relu(self.fc1(x.flatten(1)))
        x = torch.dropout(x, p=0.5, train=self.training)
        return self.fc2(x)


def resnet(depth: int):
    """torchvision's ResNet, the standard workload of scaling claims; for
    synthetic images only (3 channels, 1000 classes)."""

    def build() -> nn.Module:
        import torchvision  # only the benchmarks need it

        return getattr(torchvision.models, f"resnet{depth}")(num_classes=1000)

    return build


MODELS = {"mnist_cnn": MnistCNN, "horovod_example": HorovodExampleNet,
          "resnet18": resnet(18), "resnet50": resnet(50)}


# How a model keeps its convolution weights, and so the layout its
# activations take: channels_last (NHWC) is what oneDNN's CPU convolutions
# and the GPUs' tensor cores run fastest for most convolution nets (the
# figures: docs/benchmarks.md#memory-format).
MEMORY_FORMATS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}


def build_model(name: str, memory_format: str = "channels_last") -> nn.Module:
    """A new model, its weights in `memory_format`; inputs need no converting
    (a convolution's output takes its weights' layout)."""
    return MODELS[name]().to(memory_format=MEMORY_FORMATS[memory_format])


def input_shape(name: str, image_size: int) -> tuple[tuple[int, ...], int]:
    """(channels, height, width) of one input image, and the classes."""
    if name in MNIST_MODELS:
        return (1, 28, 28), 10
    return (3, image_size, image_size), 1000


def convert_sync_batchnorm(module: nn.Module, sync_bn_class: type[nn.Module]) -> nn.Module:
    """Replace every BatchNorm layer by sync_bn_class (Horovod's SyncBatchNorm),
    keeping its parameters and running statistics."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        synced = sync_bn_class(
            module.num_features, module.eps, module.momentum, module.affine,
            module.track_running_stats,
        )
        synced.load_state_dict(module.state_dict())
        return synced
    for name, child in module.named_children():
        module.add_module(name, convert_sync_batchnorm(child, sync_bn_class))
    return module

"""The backward timeline of a model, for benchmarks/predict_scaling.py: when
each gradient is ready, relative to the backward pass's start and length,
and how a training step divides into forward, backward and optimizer.

    python benchmarks/measure_timeline.py --model resnet50 --batch-size 8 \\
        --json benchmarks/timelines/resnet50.json

One process, one thread by default, on the CPU or (--cuda) the first GPU
it sees. A hook on each parameter (register_post_accumulate_grad_hook)
stamps the moment its gradient is accumulated: the clock on the CPU, a CUDA
event on the GPU (whose kernels run after the hook returns, so the clock
would time their launch); the stamps are divided by the backward's length, so
the file holds a shape (fractions of the backward), not times. The predictor
scales the shape to a stated one-GPU step: that the shape measured here
holds on another device is an assumption its docs state. Gradients are kept
in bins of --bins equal slices of the backward (bytes summed, each bin ready
at its last gradient), which keeps the file small and moves no gradient
later than it was ready.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks.machine import machine_record
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, UserError, run_main
from horovod_train.core.options import positive_int

PROG = "measure_timeline"
# torchvision's names, and the project's MNIST network; the image size each
# was designed for.
IMAGE_SIZES = {"mnist_cnn": 28, "resnet18": 224, "resnet50": 224, "resnet101": 224,
               "inception_v3": 299, "vgg16": 224}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=sorted(IMAGE_SIZES))
    parser.add_argument("--image-size", type=positive_int, default=None,
                        help="input height and width (default: the model's own)")
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument("--steps", type=positive_int, default=3,
                        help="timed steps after one warm-up step; the median is kept")
    parser.add_argument("--bins", type=positive_int, default=100)
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--cuda", action="store_true",
                        help="measure on the first GPU this process sees (default: the CPU)")
    parser.add_argument("--json", type=Path, required=True, metavar="FILE")
    args = parser.parse_args(argv)
    if not args.json.resolve().parent.is_dir():
        parser.error(f"--json: directory {args.json.resolve().parent} does not exist")
    return args


def build(name: str):
    import torch  # noqa: F401  (torchvision needs it imported first)

    if name == "mnist_cnn":
        from horovod_train.torch.models import MnistCNN

        return MnistCNN(), 1, 10
    import torchvision

    if name == "inception_v3":
        # The auxiliary head only trains with its own loss; the published
        # runs' gradients are the main network's.
        return torchvision.models.inception_v3(aux_logits=False, init_weights=False), 3, 1000
    return getattr(torchvision.models, name)(num_classes=1000), 3, 1000


class Clock:
    """Marks in a step and the seconds between them: perf_counter on the
    CPU; on a GPU, CUDA events on the current stream, read once the step
    has finished (seconds() synchronises)."""

    def __init__(self, torch, cuda: bool):
        self.torch, self.cuda = torch, cuda

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        if not self.cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def measure(args: argparse.Namespace) -> dict:
    import torch

    if args.cuda and not torch.cuda.is_available():
        raise UserError("--cuda: torch sees no GPU")
    device = torch.device("cuda" if args.cuda else "cpu")
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model, channels, classes = build(args.model)
    # The trainers' layout (horovod_train/torch/models.py), on CPUs and GPUs.
    model = model.to(device, memory_format=torch.channels_last)
    size = args.image_size or IMAGE_SIZES[args.model]
    images = torch.randn(args.batch_size, channels, size, size).to(
        device, memory_format=torch.channels_last)
    labels = torch.randint(0, classes, (args.batch_size,)).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    clock = Clock(torch, args.cuda)
    stamps = [None] * len(params)

    def stamp(index: int):
        def hook(_param):
            stamps[index] = clock.mark()
        return hook

    for index, param in enumerate(params):
        param.register_post_accumulate_grad_hook(stamp(index))
    steps = []
    for step in range(args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        start = clock.mark()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        backward_start = clock.mark()
        loss.backward()
        backward_end = clock.mark()
        optimizer.step()
        end = clock.mark()
        length = clock.seconds(backward_start, backward_end)
        if step == 0:
            continue  # the warm-up: allocations and kernel choices
        steps.append({"forward_s": clock.seconds(start, backward_start), "backward_s": length,
                      "optimizer_s": clock.seconds(backward_end, end),
                      "ready": [clock.seconds(backward_start, s) / length for s in stamps]})
    middle = sorted(steps, key=lambda s: s["forward_s"] + s["backward_s"] + s["optimizer_s"])[
        len(steps) // 2]
    ready = [statistics.median(s["ready"][i] for s in steps) for i in range(len(params))]
    sizes = [p.numel() * 4 for p in params]  # fp32 gradients
    bins: dict[int, list[float]] = {}
    for fraction, size_bytes in zip(ready, sizes, strict=True):
        fraction = min(max(fraction, 0.0), 1.0)
        index = min(int(fraction * args.bins), args.bins - 1)
        entry = bins.setdefault(index, [0.0, 0])
        entry[0] = max(entry[0], fraction)
        entry[1] += size_bytes
    step_s = middle["forward_s"] + middle["backward_s"] + middle["optimizer_s"]
    return {
        "schema_version": 1,
        "model": args.model,
        "image_size": size,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "device": torch.cuda.get_device_name(device) if args.cuda else "cpu",
        "torch": torch.__version__,
        "parameters": sum(p.numel() for p in params),
        "gradient_bytes": sum(sizes),
        "tensors": len(params),
        "measured_step_s": step_s,
        "shares": {"forward": middle["forward_s"] / step_s,
                   "backward": middle["backward_s"] / step_s,
                   "optimizer": middle["optimizer_s"] / step_s},
        # [fraction of the backward when the bin's last gradient was ready,
        # bytes of fp32 gradients in the bin], in ready order
        "gradients": [[round(bins[i][0], 4), bins[i][1]] for i in sorted(bins)],
    }


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        record = measure(args)
    except RuntimeError as err:  # torch's own, e.g. out of memory
        raise UserError(f"{args.model}: {str(err).splitlines()[0]}") from None
    atomic_write_json(args.json, {**record, "machine": machine_record()})
    print(f"{PROG}: {args.model}: {record['tensors']} gradients, "
          f"{record['gradient_bytes'] / 1e6:.1f} MB in {len(record['gradients'])} bins; "
          f"forward/backward/optimizer {record['shares']['forward']:.2f}/"
          f"{record['shares']['backward']:.2f}/{record['shares']['optimizer']:.2f}; "
          f"wrote {args.json}")
    return 0


def cli() -> None:
    run_main(lambda: main(sys.argv[1:]), prog=PROG)


if __name__ == "__main__":
    cli()

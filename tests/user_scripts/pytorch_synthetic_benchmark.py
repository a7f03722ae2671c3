"""A user's own Horovod benchmark, in the shape of Horovod's PyTorch
synthetic benchmark: random images through a small CNN, timed in rounds,
and the line such benchmarks end with, printed by rank 0:

    Total img/sec on 2 CPU(s): 812.4 +-10.3

Written for the tests (benchmarks/run_matrix.sh --command reads that line);
nothing of the platform in it."""

import argparse
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser(description="PyTorch synthetic benchmark with Horovod")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--steps-per-round", type=int, default=4)
args = parser.parse_args()

hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                      nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
images, labels = torch.randn(args.batch_size, 3, 32, 32), torch.randint(0, 10, (args.batch_size,))


def step():
    optimizer.zero_grad()
    F.cross_entropy(model(images), labels).backward()
    optimizer.step()


step()  # warm-up
rates = []
for _ in range(args.rounds):
    started = time.perf_counter()
    for _ in range(args.steps_per_round):
        step()
    rates.append(args.batch_size * args.steps_per_round / (time.perf_counter() - started))
mean = sum(rates) / len(rates)
spread = (sum((r - mean) ** 2 for r in rates) / len(rates)) ** 0.5
if hvd.rank() == 0:
    print(f"Img/sec per CPU: {mean:.1f} +-{1.96 * spread:.1f}")
    print(f"Total img/sec on {hvd.size()} CPU(s): {hvd.size() * mean:.1f} "
          f"+-{hvd.size() * 1.96 * spread:.1f}")

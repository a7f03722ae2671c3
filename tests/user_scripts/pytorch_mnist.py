"""A user's own Horovod script, in the shape of Horovod's PyTorch MNIST
example: torchvision's MNIST, a DistributedSampler, hvd.DistributedOptimizer,
rank 0 writes. Written for the tests, and named as the project's trainer on
purpose (a user's first script often is); nothing of the platform in it.
With --out, rank 0 writes what the run did there as JSON, with the HVT_
settings its launcher handed it."""

import argparse
import json
import os
import socket
import sys

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms

parser = argparse.ArgumentParser(description="PyTorch MNIST with Horovod (a user's script)")
parser.add_argument("--data-dir", required=True)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--out", help="rank 0 writes the run's figures here (JSON)")
args = parser.parse_args()

hvd.init()
torch.manual_seed(42)
torch.set_num_threads(1)
pixels = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
train = datasets.MNIST(args.data_dir, train=True, download=False, transform=pixels)
sampler = DistributedSampler(train, num_replicas=hvd.size(), rank=hvd.rank())
loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

losses = []
for epoch in range(1, args.epochs + 1):
    sampler.set_epoch(epoch)
    for images, labels in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    losses.append(hvd.allreduce(loss.detach(), name="loss").item())
    if hvd.rank() == 0:
        print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)

weights = torch.cat([p.detach().flatten() for p in model.parameters()])
checksums = hvd.allgather(weights.sum().reshape(1))
hosts = hvd.allgather_object(socket.gethostname())
if hvd.rank() == 0 and args.out:
    with open(args.out, "w") as file:
        json.dump({"size": hvd.size(), "hosts": {h: hosts.count(h) for h in sorted(set(hosts))},
                   "losses": losses, "same_weights": bool((checksums == checksums[0]).all()),
                   "argv": sys.argv[1:], "mpi": hvd.mpi_enabled(),
                   # What the launcher handed the rank, for the test's eyes.
                   "launcher_settings": {name: value for name, value in os.environ.items()
                                         if name.startswith("HVT_")}}, file)

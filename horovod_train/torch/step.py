"""The PyTorch step, apart from the run that calls it (trainer.py, elastic.py,
the lab's throughput benchmark): one batch forward and backward, the
optimizer step after every few, the loss every rank agrees on checked once
per step, and the evaluation of one batch."""

import itertools
import os

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from horovod_train.core import loop
from horovod_train.torch.precision import autocast, step_reduced


def set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def batch_trainer(model, optimizer, device, amp_dtype, scaler, passes: int,
                  label_smoothing: float = 0.0):
    """The PyTorch step as the loop calls it, once per batch: forward and
    backward, and the optimizer step after every `passes` batches. It
    returns the batch's sums as device tensors, so nothing waits for the
    device or for Horovod (no .item(), no synchronize() except the
    loss-scaling pattern): the allreduces that backward() starts overlap
    the rest of the backward pass and, on a GPU, the host runs ahead
    queueing the next steps."""
    batches_done = itertools.count(1)
    step_loss = None  # this rank's loss over the step's batches so far, on the device
    reduces_in_step = adasum_optimizer(optimizer)
    losses = LossCheck(optimizer, device)

    def train_batch(images, labels) -> loop.BatchSums:
        nonlocal step_loss
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        with autocast(device, amp_dtype):
            output = model(images)
            loss = F.cross_entropy(output, labels, label_smoothing=label_smoothing)
        scaler.scale(loss / passes).backward()
        step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        if next(batches_done) % passes == 0:
            losses.submit(step_loss)  # LossCheck says why here
            step_loss = None
            if reduces_in_step and not scaler.is_enabled():
                # Adasum's reduction is part of its step, after the update:
                # the check follows it (and still precedes any write).
                optimizer.step()
                losses.check()
            else:
                optimizer.synchronize()
                losses.check()
                step_reduced(optimizer, scaler)
            optimizer.zero_grad()
        with torch.no_grad():
            return (loss.detach().double() * len(labels), (output.argmax(1) == labels).sum(),
                    len(labels))

    return train_batch


class LossCheck:
    """loop.check_loss once per optimizer step, on the loss that every rank
    agrees on: submit() before the gradients are waited for, check() after.

    Why so: with several ranks, the loss's average goes in with the
    gradients' allreduces (submitted before synchronize(), with their
    operation, factors and dtype, so Horovod fuses it into their cycle);
    synchronize() waits for those anyway, so reading the average then is a
    copy of 4 bytes, before the update is queued, and every rank stops at
    the same step. One rank has no allreduce to join (Horovod reduces
    nothing at size 1): on the CPU its loss is read at once; on a GPU it is
    copied to the host without waiting and read at the next step, when the
    copy is done unless the device is more than a step behind, so the host
    still runs ahead (the epoch's last step: the loop's check of the
    epoch's loss). An elastic run, whose size changes, reads at once."""

    def __init__(self, optimizer, device: torch.device):
        self.optimizer = optimizer
        self.lagged = device.type == "cuda" and os.environ.get("HOROVOD_ELASTIC") != "1"
        self.handle = self.local = None
        self.host = self.copied = None  # one rank on a GPU: the last step's loss, its event

    def submit(self, loss: torch.Tensor) -> None:
        if hvd.size() > 1:
            self.handle = agreed_loss(self.optimizer, loss)
        elif not self.lagged:
            self.local = loss
        else:
            if self.copied is None:
                self.host = torch.empty(1, pin_memory=True)
                self.copied = torch.cuda.Event()
            else:
                self.copied.synchronize()
                loop.check_loss(self.host.item(), steps_back=1)
            self.host.copy_(loss.float().reshape(1), non_blocking=True)
            self.copied.record()

    def check(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            loop.check_loss(hvd.synchronize(handle).item())
        elif self.local is not None:
            local, self.local = self.local, None
            loop.check_loss(local.item())


def adasum_optimizer(optimizer) -> bool:
    """Whether `optimizer` is Horovod's Adasum optimizer (Adasum over more
    than one rank), whose reduction happens inside step(), after the local
    update, and cannot be waited for apart from it."""
    from horovod.torch.optimizer import _DistributedAdasumOptimizer

    skip = "skip_synchronize"  # step() itself gets wrapped by torch (profiling hooks)
    return type(optimizer).__dict__.get(skip) is _DistributedAdasumOptimizer.__dict__[skip]


def agreed_loss(optimizer, loss: torch.Tensor):
    """Start the allreduce of this rank's loss that averages it over the
    ranks, as the Horovod optimizer reduces its gradients (same operation,
    same scale factors, float32: Horovod fuses only such); the handle, for
    hvd.synchronize. Adasum's combination is for gradients: a plain average
    here."""
    op = getattr(optimizer, "op", hvd.Average)
    predivide = getattr(optimizer, "gradient_predivide_factor", 1.0)
    if op != hvd.Average:
        op, predivide = hvd.Average, 1.0
    return hvd.allreduce_async(loss.float().reshape(1), name="loss", op=op,
                               prescale_factor=1.0 / predivide, postscale_factor=predivide)


@torch.no_grad()
def eval_batch(model, images, labels, device, amp_dtype) -> loop.BatchSums:
    images, labels = images.to(device), labels.to(device)
    with autocast(device, amp_dtype):
        output = model(images)
    return (F.cross_entropy(output.float(), labels, reduction="sum"),
            (output.argmax(1) == labels).sum(), len(labels))

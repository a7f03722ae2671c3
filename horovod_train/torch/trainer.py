"""The PyTorch training run: Horovod set-up, data shards, evaluation,
checkpoints and the closing summary, around the step (step.py). Every rank
runs all of it; only rank 0 writes files and prints."""

import socket
import time

import horovod.torch as hvd
import torch
from torch import nn

from horovod_train.core import (
    console,
    distributed,
    loop,
    lr_schedule,
    metrics,
    mnist,
    runtime,
)
from horovod_train.core.config import RunConfig
from horovod_train.core.errors import UserError
from horovod_train.torch import (
    allocator,
    checkpoint,
    dataloader,
    device_data,
    gpu,
    nccl_report,
)
from horovod_train.torch.models import build_model, convert_sync_batchnorm
from horovod_train.torch.precision import amp_name, amp_settings
from horovod_train.torch.step import batch_trainer, eval_batch, set_lr

# This process's NCCL debug output (GPU runs): set up before hvd.init(), read
# after NCCL's first collective (nccl_transport).
NCCL_OUTPUT = nccl_report.DebugOutput()


def init(use_cuda: bool, threads: int | None,
         seed: int) -> tuple[runtime.Runtime, torch.device]:
    """hvd.init(), one GPU per rank (or the CPU), CPU threads shared out
    among the ranks of a host, and the same seed everywhere so every rank
    builds the same initial model (rank 0's is broadcast anyway)."""
    allocator.keep_freed_memory()
    if use_cuda:
        # A driver too old leaves torch quietly without CUDA.
        driver_cuda = gpu.check_driver(torch)
        gpu.check_present(hvd, torch, socket.gethostname(), driver_cuda)
    use_cuda = use_cuda and torch.cuda.is_available()
    if use_cuda:
        NCCL_OUTPUT.start()
    runtime.init_horovod(hvd, cpu_tensors=not use_cuda)
    if use_cuda:
        device = gpu.take_gpu(hvd, torch, socket.gethostname())
        torch.cuda.set_device(device)
        gpu.check_architecture(torch, device)
    else:
        device = torch.device("cpu")
    threads = runtime.threads_per_rank(hvd.local_size(), threads)
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    return runtime.describe(hvd, str(device), threads), device


def nccl_transport(rt: runtime.Runtime, device: torch.device) -> dict:
    """Which transport NCCL chose, every rank's gathered (nccl_report):
    rank 0 prints it, with a warning where a host's InfiniBand goes unused."""
    # NCCL sets up its communicator and connections at its first collective:
    # this one, if the broadcasts before it went another way.
    hvd.allreduce(torch.zeros(1, device=device), name="nccl_report.first")
    mine = NCCL_OUTPUT.rank_record(rt.hostname)
    record = nccl_report.run_record(hvd.allgather_object(mine, name="nccl_report"))
    if rt.is_root:
        for line in nccl_report.report_lines(record):
            console.say(line)
    return record


def sum_across_ranks(values: list[float], name: str) -> list[float]:
    summed = hvd.allreduce(torch.tensor(values, dtype=torch.float64), op=hvd.Sum, name=name)
    return summed.tolist()


def average_buffers(model: nn.Module) -> None:
    """Average floating-point buffers (batch-norm running statistics) across
    ranks. Horovod averages gradients only, so without this every rank keeps
    its own statistics and evaluates a slightly different model."""
    for name, buf in model.named_buffers():
        if buf.is_floating_point():
            buf.copy_(hvd.allreduce(buf, op=hvd.Average, name=f"buffer.{name}"))


def state_digest(model: nn.Module) -> str:
    # Raw bytes whatever the dtype (bf16 has no numpy twin).
    return distributed.digest(
        (key, t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
        for key, t in model.state_dict().items())


def training_batches(pipeline: str, split: mnist.Split, batch_size: int, rt: runtime.Runtime,
                     seed: int, device: torch.device, workers: int):
    """This rank's training batches, epoch by epoch (`.epoch(e)`, `len()`):
    the whole split on the device ("memory") or a DataLoader ("loader")."""
    if pipeline == "memory":
        return device_data.ShardedBatches(device_data.DeviceMnist(split, device), batch_size,
                                          rt.rank, rt.size, seed)
    loader, sampler = dataloader.train_loader(
        dataloader.MnistTensors(split), batch_size, rt.rank, rt.size, seed, workers,
        pin_memory=device.type == "cuda")
    return dataloader.LoaderBatches(loader, sampler, device)


def evaluation_batches(pipeline: str, split: mnist.Split, batch_size: int,
                       rt: runtime.Runtime, device: torch.device):
    """This rank's disjoint slice of the test split, as batches."""
    if pipeline == "memory":
        return device_data.EvalBatches(device_data.DeviceMnist(split, device), batch_size,
                                       rt.rank, rt.size)
    return dataloader.test_loader(dataloader.MnistTensors(split), batch_size, rt.rank, rt.size)


def distributed_optimizer(model: nn.Module, lr: float, momentum: float, fp16_allreduce: bool,
                          use_adasum: bool = False, backward_passes_per_step: int = 1,
                          gradient_predivide_factor: float = 1.0):
    """SGD with momentum wrapped in Horovod's DistributedOptimizer: each
    gradient's allreduce starts from a backward hook as soon as it is ready,
    overlapping the rest of the backward pass; step() waits for them."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    return hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none,
        op=hvd.Adasum if use_adasum else hvd.Average,
        backward_passes_per_step=backward_passes_per_step,
        gradient_predivide_factor=gradient_predivide_factor,
    )


class TorchTrainer(loop.Trainer):
    """What every PyTorch run does the same way: one model and one Horovod
    optimizer on a device, their checkpoint, the collectives of
    horovod.torch. Each kind of run (epochs, elastic) adds its batches and
    its step."""

    framework = "pytorch"

    def __init__(self, config: RunConfig, model: nn.Module, optimizer, device: torch.device,
                 n_train: int, n_test: int, lr_scale: float):
        self.config, self.model, self.optimizer, self.device = config, model, optimizer, device
        self.model_name = config.framework.torch.model
        self.n_train, self.n_test, self.lr_scale = n_train, n_test, lr_scale
        self.amp_dtype, self.use_scaler = amp_settings(device, config.framework.torch.amp)

    def versions(self) -> dict:
        # Epoch and elastic runs on GPUs alike record them.
        if self.device.type != "cuda":
            return {}
        return {"cuda": torch.version.cuda,
                "nccl": ".".join(str(part) for part in torch.cuda.nccl.version())}

    def set_lr(self, lr: float) -> None:
        set_lr(self.optimizer, lr)

    def sum_across_ranks(self, values: list[float], name: str) -> list[float]:
        return sum_across_ranks(values, name)

    def allgather_object(self, obj, name: str) -> list:
        return hvd.allgather_object(obj, name=name)

    def average_buffers(self) -> None:
        average_buffers(self.model)

    def save_checkpoint(self, epochs_done: int, extra: dict) -> None:
        checkpoint.save(self.config.outputs.checkpoint_dir, self.model, self.optimizer,
                        self.model_name, epochs_done, extra=extra)

    def digest(self) -> str:
        return state_digest(self.model)

    def summary_fields(self) -> dict:
        return {"amp": amp_name(self.amp_dtype)}

    def describe(self) -> str:
        return f"amp {amp_name(self.amp_dtype)}"

    def divergence_advice(self) -> list[str]:
        if self.amp_dtype != torch.float16:
            return []
        choices = "bf16 or off" if torch.cuda.is_bf16_supported() else "off"
        return [f"train in --amp {choices} (float16's range overflows first)"]

    def start_eval(self) -> None:
        self.model.eval()


class EpochTrainer(TorchTrainer):
    """The run of whole epochs on a fixed set of ranks: each rank's shard of
    the training split, mixed precision on GPUs, gradients accumulated over
    --backward-passes-per-step batches."""

    def __init__(self, config: RunConfig, model: nn.Module, optimizer, device: torch.device,
                 rt: runtime.Runtime, train_split: mnist.Split, test_split: mnist.Split,
                 lr_scale: float, nccl: dict | None):
        super().__init__(config, model, optimizer, device, len(train_split), len(test_split),
                         lr_scale)
        schedule, options = config.schedule, config.framework.torch
        self.rank, self.seed, self.nccl = rt.rank, schedule.seed, nccl
        workers = options.num_workers if options.num_workers is not None else (
            2 if device.type == "cuda" else 0)
        self.train_batches = training_batches(options.data_pipeline, train_split,
                                              schedule.batch_size, rt, schedule.seed, device,
                                              workers)
        self.test_batches = evaluation_batches(options.data_pipeline, test_split,
                                               schedule.test_batch_size, rt, device)
        passes = self.batches_per_step = options.backward_passes_per_step
        # Same count on every rank (the shards are padded): whole optimizer steps only.
        self.batches_per_epoch = len(self.train_batches) // passes * passes
        if self.batches_per_epoch == 0:
            raise UserError(
                f"{len(train_split)} training images over {rt.size} ranks give fewer than "
                f"{passes} batches of {schedule.batch_size} per rank")
        self.step = batch_trainer(model, optimizer, device, self.amp_dtype,
                                  torch.amp.GradScaler("cuda", enabled=self.use_scaler), passes,
                                  options.label_smoothing)

    def start_epoch(self, epoch: int) -> None:
        self.model.train()
        # Dropout draws depend on (seed, epoch, rank) only, so a resumed run
        # repeats what an uninterrupted one would have drawn.
        torch.manual_seed(self.seed * 1_000_003 + epoch * 1009 + self.rank)

    def epoch_batches(self, epoch: int):
        return self.train_batches.epoch(epoch)

    def train_batch(self, images, labels) -> loop.BatchSums:
        return self.step(images, labels)

    def eval_batches(self):
        return self.test_batches

    def eval_batch(self, images, labels) -> loop.BatchSums:
        return eval_batch(self.model, images, labels, self.device, self.amp_dtype)

    def summary_fields(self) -> dict:
        return {**super().summary_fields(), "nccl": self.nccl}


def run(config: RunConfig) -> dict:
    """The training run: the shared epoch loop (loop.fit) with an EpochTrainer."""
    started = time.perf_counter()
    schedule, horovod, out = config.schedule, config.horovod, config.outputs
    options = config.framework.torch
    rt, device = init(use_cuda=not config.device.no_cuda, threads=config.device.threads,
                      seed=schedule.seed)
    on_cuda = device.type == "cuda"
    distributed.check_placement(config, rt, on_cuda)
    train_split, test_split = distributed.prepare_run(hvd, rt, config)

    model = build_model(options.model, options.memory_format)
    if options.sync_bn:
        model = convert_sync_batchnorm(model, hvd.SyncBatchNorm)
    model.to(device)
    scale = lr_schedule.lr_scale(rt.size, horovod.use_adasum, rt.local_size, on_cuda)
    optimizer = distributed_optimizer(model, schedule.lr, schedule.momentum,
                                      horovod.fp16_allreduce, horovod.use_adasum,
                                      options.backward_passes_per_step,
                                      horovod.gradient_predivide_factor)

    epochs_done = 0
    if out.resume:
        epochs_done = distributed.resume_on_root(hvd, rt, lambda: checkpoint.resume(
            out.checkpoint_dir, model, optimizer, options.model))
    metrics.note_checkpoint(rt, checkpoint.checkpoint_path(out.checkpoint_dir), out.resume)
    # Every rank starts from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    nccl = nccl_transport(rt, device) if on_cuda else None
    trainer = EpochTrainer(config, model, optimizer, device, rt, train_split, test_split, scale,
                           nccl)
    return loop.fit(config, rt, trainer, epochs_done, started)

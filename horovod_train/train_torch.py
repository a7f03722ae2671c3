"""The PyTorch training run: Horovod set-up, data shards, the step, evaluation,
checkpoints and the closing summary. Every rank runs all of it; only rank 0
writes files and prints."""

import argparse
import contextlib
import itertools
import math
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn

from horovod_train import benchmark as benchmark_loop
from horovod_train import (
    checkpoint,
    console,
    device_data,
    distributed,
    lr_schedule,
    metrics,
    mnist,
    torch_data,
)
from horovod_train.errors import UserError
from horovod_train.models import build_model, convert_sync_batchnorm, input_shape


def init(use_cuda: bool, threads: int | None, seed: int) -> tuple[distributed.Runtime,
                                                                   torch.device]:
    """hvd.init(), one GPU per local rank (or the CPU), CPU threads shared out
    among the ranks of a host, and the same seed everywhere so every rank
    builds the same initial model (rank 0's is broadcast anyway)."""
    hvd.init()
    if use_cuda and torch.cuda.is_available():
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    threads = distributed.threads_per_rank(hvd.local_size(), threads)
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    return distributed.describe(hvd, str(device), threads), device


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


def amp_settings(device: torch.device) -> tuple[torch.dtype | None, bool]:
    """Autocast dtype and whether gradients need loss scaling: bf16 where the
    GPU has it (no scaling needed), else fp16 with a GradScaler; none on CPU."""
    if device.type != "cuda":
        return None, False
    if torch.cuda.is_bf16_supported():
        return torch.bfloat16, False
    return torch.float16, True


def training_batches(pipeline: str, split: mnist.Split, batch_size: int, rt: distributed.Runtime,
                     seed: int, device: torch.device, workers: int):
    """This rank's training batches, epoch by epoch (`.epoch(e)`, `len()`):
    the whole split on the device ("memory") or a DataLoader ("loader")."""
    if pipeline == "memory":
        return device_data.ShardedBatches(device_data.DeviceMnist(split, device), batch_size,
                                          rt.rank, rt.size, seed)
    loader, sampler = torch_data.train_loader(
        torch_data.MnistTensors(split), batch_size, rt.rank, rt.size, seed, workers,
        pin_memory=device.type == "cuda")
    return torch_data.LoaderBatches(loader, sampler, device)


def evaluation_batches(pipeline: str, split: mnist.Split, batch_size: int,
                       rt: distributed.Runtime, device: torch.device):
    """This rank's disjoint slice of the test split, as batches."""
    if pipeline == "memory":
        return device_data.EvalBatches(device_data.DeviceMnist(split, device), batch_size,
                                       rt.rank, rt.size)
    return torch_data.test_loader(torch_data.MnistTensors(split), batch_size, rt.rank, rt.size)


def distributed_optimizer(model: nn.Module, lr: float, momentum: float, fp16_allreduce: bool,
                          use_adasum: bool = False, backward_passes_per_step: int = 1):
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
    )


def run(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    rt, device = init(use_cuda=not args.no_cuda, threads=args.threads, seed=args.seed)
    root = rt.is_root
    on_cuda = device.type == "cuda"
    distributed.check_controller(args.use_adasum, rt.controller, "pytorch")
    if args.sync_bn and not on_cuda:
        raise UserError("--sync-bn needs GPUs: Horovod's SyncBatchNorm works on CUDA tensors only")
    train_split, test_split = distributed.prepare_run(hvd, rt, args)
    workers = args.num_workers if args.num_workers is not None else (2 if on_cuda else 0)
    train_batches = training_batches(args.data_pipeline, train_split, args.batch_size, rt,
                                     args.seed, device, workers)
    eval_batches = evaluation_batches(args.data_pipeline, test_split, args.test_batch_size, rt,
                                      device)

    model = build_model(args.model)
    if args.sync_bn:
        model = convert_sync_batchnorm(model, hvd.SyncBatchNorm)
    model.to(device)
    scale = lr_schedule.lr_scale(rt.size, args.use_adasum, rt.local_size, on_cuda)
    optimizer = distributed_optimizer(model, args.lr, args.momentum, args.fp16_allreduce,
                                      args.use_adasum, args.backward_passes_per_step)

    epochs_done = 0
    if args.resume:
        epochs_done = distributed.resume_on_root(hvd, rt, lambda: checkpoint.resume(
            args.checkpoint_dir, model, optimizer, args.model))
    metrics.note_checkpoint(rt, checkpoint.checkpoint_path(args.checkpoint_dir), args.resume)
    # Every rank starts from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    amp_dtype, use_scaler = amp_settings(device)
    scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    passes = args.backward_passes_per_step
    # Same count on every rank (the shards are padded): whole optimizer steps only.
    steps_per_epoch = len(train_batches) // passes
    if steps_per_epoch == 0:
        raise UserError(
            f"{len(train_split)} training images over {rt.size} ranks give fewer than "
            f"{passes} batches of {args.batch_size} per rank"
        )
    log = metrics.MetricsLog(args.log_dir, enabled=root, epochs_done=epochs_done)
    metrics.announce(rt, "pytorch", args.model, len(train_split), len(test_split), args.lr, scale,
                     epochs_done)

    def lr_at(step: int) -> float:
        return lr_schedule.learning_rate(step, steps_per_epoch, args.epochs, args.lr, scale,
                                         args.warmup_epochs)

    images_seen, step_seconds = 0, 0.0
    test_metrics = {"test_loss": math.nan, "test_accuracy": math.nan}
    # Training time, and time to accuracy, count from here (options.TIMES_EPILOG).
    training_started, target = time.perf_counter(), {"target_reached_epoch": None,
                                                     "time_to_target_s": None}
    for epoch in range(epochs_done, args.epochs):
        # Dropout draws depend on (seed, epoch, rank) only, so a resumed run
        # repeats what an uninterrupted one would have drawn.
        torch.manual_seed(args.seed * 1_000_003 + epoch * 1009 + rt.rank)
        bar = console.progress(steps_per_epoch * passes, f"epoch {epoch + 1}/{args.epochs}",
                               enabled=root and not args.no_progress,
                               every_s=args.progress_every)
        tic = time.perf_counter()
        loss_sum, correct, count, lr = train_epoch(
            model, optimizer, train_batches.epoch(epoch), device, amp_dtype, scaler, passes,
            first_step=epoch * steps_per_epoch, steps=steps_per_epoch, lr_at=lr_at, bar=bar)
        epoch_seconds = time.perf_counter() - tic
        bar.close()
        images_seen += int(count)
        step_seconds += epoch_seconds

        average_buffers(model)
        test_metrics = evaluate(model, eval_batches, device, amp_dtype)
        # Every rank sees the same accuracy (summed over ranks), so all stop together.
        reached = (args.target_accuracy is not None
                   and test_metrics["test_accuracy"] >= args.target_accuracy)
        if reached:
            target = {"target_reached_epoch": epoch + 1,
                      "time_to_target_s": time.perf_counter() - training_started}
        record = metrics.epoch_record(
            epoch + 1, lr,
            sum_across_ranks([loss_sum, correct, count, count / epoch_seconds], f"train.{epoch}"),
            test_metrics, epoch_seconds)
        log.log_epoch(record)
        if root:
            checkpoint.save(args.checkpoint_dir, model, optimizer, args.model, epoch + 1,
                            extra={"metrics": record, "world_size": rt.size})
            console.say(metrics.format_epoch(record))
        if reached:
            if root:
                console.say(f"reached test accuracy {args.target_accuracy} after epoch "
                            f"{epoch + 1}, {target['time_to_target_s']:.1f} s of training")
            break
    train_seconds = time.perf_counter() - training_started
    log.close()
    if epochs_done >= args.epochs:
        test_metrics = evaluate(model, eval_batches, device, amp_dtype)

    mine = metrics.rank_figures(rt, images_seen, step_seconds, train_seconds, state_digest(model))
    ranks = hvd.allgather_object(mine, name="summary")
    summary = metrics.build_summary("pytorch", args.model, rt, ranks, test_metrics, args.epochs,
                                    epochs_done, time.perf_counter() - started, args)
    summary.update(target_accuracy=args.target_accuracy, **target)
    return metrics.finish_run(rt, args.log_dir, summary)


def train_epoch(model, optimizer, batches, device, amp_dtype, scaler, passes: int,
                first_step: int, steps: int, lr_at, bar) -> tuple[float, float, float, float]:
    """`steps` optimizer steps of `passes` batches each, taken from the
    iterator `batches`; returns the loss sum, correct count and image count
    on this rank, and the last learning rate.

    Nothing here waits for the device or for Horovod before the end: no
    .item(), no explicit synchronize() (except the loss-scaling pattern), so
    the allreduces that backward() starts overlap the rest of the backward
    pass and, on a GPU, the host runs ahead queueing the next steps."""
    model.train()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    count = 0
    lr = lr_at(first_step)
    for i, (images, labels) in enumerate(itertools.islice(batches, steps * passes)):
        if i % passes == 0:
            lr = lr_at(first_step + i // passes)
            for group in optimizer.param_groups:
                group["lr"] = lr
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        autocast = (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype
                    else contextlib.nullcontext())
        with autocast:
            output = model(images)
            loss = F.cross_entropy(output, labels)
        scaler.scale(loss / passes).backward()
        if (i + 1) % passes == 0:
            if scaler.is_enabled():
                # Horovod's pattern for loss scaling: reduce, unscale, then
                # step without reducing a second time.
                optimizer.synchronize()
                scaler.unscale_(optimizer)
                with optimizer.skip_synchronize():
                    scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
        with torch.no_grad():
            # Accumulated on the device: no host sync per step.
            loss_sum.add_(loss.detach(), alpha=len(labels))
            correct += (output.argmax(1) == labels).sum()
        count += len(labels)
        bar.update()
    # Waits for the device once per epoch.
    return loss_sum.item(), float(correct.item()), float(count), lr


@torch.no_grad()
def evaluate(model, batches, device, amp_dtype) -> dict:
    """Test loss and accuracy over all ranks; `batches` is this rank's slice
    (a DataLoader or device_data.EvalBatches)."""
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    count = 0
    for images, labels in batches:
        images, labels = images.to(device), labels.to(device)
        autocast = (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype
                    else contextlib.nullcontext())
        with autocast:
            output = model(images)
        loss_sum += F.cross_entropy(output.float(), labels, reduction="sum")
        correct += (output.argmax(1) == labels).sum()
        count += len(labels)
    loss_sum, correct, count = sum_across_ranks([loss_sum.item(), float(correct.item()), count],
                                                "eval")
    return {"test_loss": loss_sum / count, "test_accuracy": correct / count}


def benchmark(args: argparse.Namespace) -> dict:
    """Time --benchmark-steps training steps (after --warmup-steps) with
    Horovod; rank 0 writes every rank's figures to LOG_DIR/benchmark.json."""
    rt, device = init(use_cuda=not args.no_cuda, threads=args.threads, seed=args.seed)
    distributed.check_all_ranks(hvd, lambda: rt.is_root and metrics.prepare_output_dirs(
        args.log_dir, args.log_dir), "dirs")
    model = build_model(args.model).to(device)
    if args.synthetic:
        shape, classes = input_shape(args.model, args.image_size)
        batches = benchmark_loop.synthetic_batches(args.batch_size, shape, classes, device)
    else:
        train_split = distributed.check_all_ranks(
            hvd, lambda: mnist.load_train_test(args.data_dir, download=not args.no_download)[0],
            "data")
        batches = benchmark_loop.every_epoch(training_batches(
            args.data_pipeline, train_split, args.batch_size, rt, args.seed, device, workers=0))
    optimizer = distributed_optimizer(model, args.lr, args.momentum, args.fp16_allreduce)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    model.train()
    mine = benchmark_loop.time_steps(benchmark_loop.horovod_step(model, optimizer, batches),
                                     args.warmup_steps, args.benchmark_steps, args.batch_size,
                                     device)
    per_rank = hvd.allgather_object(mine, name="benchmark")
    record = benchmark_loop.summarize(per_rank, {
        "launcher": "horovod", "controller": rt.controller, "model": args.model,
        "workload": "synthetic" if args.synthetic else "mnist", "device": device.type,
        "data_pipeline": None if args.synthetic else args.data_pipeline,
        "batch_per_rank": args.batch_size, "warmup_steps": args.warmup_steps,
        "steps": args.benchmark_steps, "threads_per_rank": rt.threads,
        "fp16_allreduce": args.fp16_allreduce,
        "parameters": sum(p.numel() for p in model.parameters()),
        "gradient_bytes": benchmark_loop.gradient_bytes(model, args.fp16_allreduce),
    }, measures_allreduce=True)
    if rt.is_root:
        benchmark_loop.write_result(args.log_dir, record)
        console.say(benchmark_loop.format_result(record))
    return record

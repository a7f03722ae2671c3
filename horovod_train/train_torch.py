"""The PyTorch training run: Horovod set-up, data shards, the step, evaluation,
checkpoints and the closing summary. Every rank runs all of it; only rank 0
writes files and prints."""

import argparse
import collections
import contextlib
import math
import os
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from horovod_train import checkpoint, distributed, lr_schedule, mnist, torch_data
from horovod_train.errors import UserError
from horovod_train.metrics import MetricsLog, format_summary, progress, write_summary
from horovod_train.models import build_model, convert_sync_batchnorm


def prepare_output_dirs(log_dir, checkpoint_dir) -> None:
    for directory in (log_dir, checkpoint_dir):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create {directory}: {err.strerror}") from None
        if not os.access(directory, os.W_OK | os.X_OK):
            raise UserError(f"{directory} is not writable")


def amp_settings(device: torch.device) -> tuple[torch.dtype | None, bool]:
    """Autocast dtype and whether gradients need loss scaling: bf16 where the
    GPU has it (no scaling needed), else fp16 with a GradScaler; none on CPU."""
    if device.type != "cuda":
        return None, False
    if torch.cuda.is_bf16_supported():
        return torch.bfloat16, False
    return torch.float16, True


def run(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    rt = distributed.init(use_cuda=not args.no_cuda, threads=args.threads, seed=args.seed)
    root = rt.is_root

    def on_root(step):
        return step() if root else None

    distributed.check_all_ranks(
        lambda: on_root(lambda: prepare_output_dirs(args.log_dir, args.checkpoint_dir)), "dirs"
    )
    train_split, test_split = distributed.check_all_ranks(
        lambda: mnist.load_train_test(args.data_dir, download=not args.no_download), "data"
    )
    train_set, test_set = torch_data.MnistTensors(train_split), torch_data.MnistTensors(test_split)
    on_cuda = rt.device.type == "cuda"
    workers = args.num_workers if args.num_workers is not None else (2 if on_cuda else 0)
    loader, sampler = torch_data.train_loader(
        train_set, args.batch_size, rt.rank, rt.size, args.seed, workers, pin_memory=on_cuda
    )
    test_loader = torch_data.test_loader(test_set, args.test_batch_size, rt.rank, rt.size)

    model = build_model(args.model)
    if args.use_adasum and rt.controller != "mpi":
        raise UserError("--use-adasum needs the MPI controller (horovodrun --mpi): "
                        "Horovod implements Adasum over MPI only")
    if args.sync_bn and not on_cuda:
        raise UserError("--sync-bn needs GPUs: Horovod's SyncBatchNorm works on CUDA tensors only")
    if args.sync_bn:
        model = convert_sync_batchnorm(model, hvd.SyncBatchNorm)
    model.to(rt.device)
    scale = lr_schedule.lr_scale(rt.size, args.use_adasum, rt.local_size, on_cuda)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        op=hvd.Adasum if args.use_adasum else hvd.Average,
        backward_passes_per_step=args.backward_passes_per_step,
    )

    epochs_done = 0
    if args.resume:
        epochs_done = distributed.check_all_ranks(
            lambda: on_root(lambda: checkpoint.resume(
                args.checkpoint_dir, model, optimizer, args.model)), "resume",
        )
        epochs_done = hvd.broadcast_object(epochs_done, root_rank=0, name="epochs_done")
    elif root and checkpoint.checkpoint_path(args.checkpoint_dir).exists():
        print(f"note: starting over; {checkpoint.checkpoint_path(args.checkpoint_dir)} "
              "will be replaced (pass --resume to continue from it)", flush=True)
    # Every rank starts from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    amp_dtype, use_scaler = amp_settings(rt.device)
    scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    passes = args.backward_passes_per_step
    # Same count on every rank (the sampler pads): whole optimizer steps only.
    steps_per_epoch = len(loader) // passes
    if steps_per_epoch == 0:
        raise UserError(
            f"{len(train_set)} training images over {rt.size} ranks give fewer than "
            f"{passes} batches of {args.batch_size} per rank"
        )
    log = MetricsLog(args.log_dir, enabled=root, append=epochs_done > 0)
    if root:
        print(f"training {args.model} on {len(train_set)} images, testing on {len(test_set)}, "
              f"{rt.size} ranks ({rt.controller}), {rt.device.type}, "
              f"{rt.threads} threads per rank, lr {args.lr} x {scale:g}"
              + (f", resuming after epoch {epochs_done}" if epochs_done else ""), flush=True)

    images_seen, train_seconds = 0, 0.0
    test_metrics = {"test_loss": math.nan, "test_accuracy": math.nan}
    for epoch in range(epochs_done, args.epochs):
        sampler.set_epoch(epoch)
        # Dropout draws depend on (seed, epoch, rank) only, so a resumed run
        # repeats what an uninterrupted one would have drawn.
        torch.manual_seed(args.seed * 1_000_003 + epoch * 1009 + rt.rank)
        model.train()
        sums = torch.zeros(3, dtype=torch.float64, device=rt.device)  # loss, correct, count
        bar = progress(steps_per_epoch * passes, f"epoch {epoch + 1}/{args.epochs}",
                       enabled=root and not args.no_progress)
        tic = time.perf_counter()
        for i, (images, labels) in enumerate(loader):
            if i >= steps_per_epoch * passes:
                break
            step = epoch * steps_per_epoch + i // passes
            if i % passes == 0:
                lr = lr_schedule.learning_rate(step, steps_per_epoch, args.epochs, args.lr,
                                               scale, args.warmup_epochs)
                for group in optimizer.param_groups:
                    group["lr"] = lr
            images = images.to(rt.device, non_blocking=True)
            labels = labels.to(rt.device, non_blocking=True)
            autocast = (torch.autocast(rt.device.type, dtype=amp_dtype) if amp_dtype
                        else contextlib.nullcontext())
            with autocast:
                output = model(images)
                loss = F.cross_entropy(output, labels)
            scaler.scale(loss / passes).backward()
            if (i + 1) % passes == 0:
                if use_scaler:
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
                sums += torch.stack([loss.detach().double() * len(labels),
                                     (output.argmax(1) == labels).sum().double(),
                                     torch.tensor(len(labels), dtype=torch.float64,
                                                  device=rt.device)])
            bar.update()
        if on_cuda:
            torch.cuda.synchronize()
        epoch_seconds = time.perf_counter() - tic
        bar.close()
        loss_sum, correct, count = sums.tolist()
        images_seen += int(count)
        train_seconds += epoch_seconds

        distributed.average_buffers(model)
        test_metrics = evaluate(model, test_loader, rt.device, amp_dtype)
        loss_sum, correct, count, rate = distributed.sum_across_ranks(
            [loss_sum, correct, count, count / epoch_seconds], f"train_metrics.{epoch}"
        )
        record = {
            "epoch": epoch + 1,
            "lr": lr,
            "train_loss": loss_sum / count,
            "train_accuracy": correct / count,
            **test_metrics,
            "images_per_sec": rate,
            "epoch_time_s": epoch_seconds,
        }
        log.log_epoch(record)
        if root:
            checkpoint.save(args.checkpoint_dir, model, optimizer, args.model, epoch + 1,
                            extra={"metrics": record, "world_size": rt.size})
            print(f"epoch {epoch + 1}: train loss {record['train_loss']:.4f} "
                  f"acc {record['train_accuracy']:.4f} | test loss {record['test_loss']:.4f} "
                  f"acc {record['test_accuracy']:.4f} | {rate:.0f} images/s", flush=True)
    log.close()
    if epochs_done >= args.epochs:
        test_metrics = evaluate(model, test_loader, rt.device, amp_dtype)

    summary = summarize(args, rt, model, test_metrics, images_seen, train_seconds,
                        epochs_done, time.perf_counter() - started)
    if root:
        write_summary(args.log_dir, summary)
        print(format_summary(summary), flush=True)
    if not summary["weights_identical"]:
        raise UserError("ranks ended with different weights: "
                        + ", ".join(sorted(set(summary["rank_digests"]))))
    return summary


@torch.no_grad()
def evaluate(model, loader, device, amp_dtype) -> dict:
    model.eval()
    loss_sum, correct, count = 0.0, 0.0, 0.0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        autocast = (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype
                    else contextlib.nullcontext())
        with autocast:
            output = model(images)
        loss_sum += F.cross_entropy(output.float(), labels, reduction="sum").item()
        correct += (output.argmax(1) == labels).sum().item()
        count += len(labels)
    loss_sum, correct, count = distributed.sum_across_ranks([loss_sum, correct, count], "eval")
    return {"test_loss": loss_sum / count, "test_accuracy": correct / count}


def summarize(args, rt, model, test_metrics, images_seen, train_seconds, epochs_done,
              wall_seconds) -> dict:
    """Gather per-rank figures and weight digests into the run's summary."""
    mine = {
        "rank": rt.rank,
        "host": rt.hostname,
        "local_rank": rt.local_rank,
        "images": images_seen,
        "train_time_s": train_seconds,
        "images_per_sec": images_seen / train_seconds if train_seconds else 0.0,
        "digest": distributed.state_digest(model),
    }
    ranks = hvd.allgather_object(mine, name="summary")
    digests = [r.pop("digest") for r in ranks]
    return {
        "framework": "pytorch",
        "model": args.model,
        "size": rt.size,
        "controller": rt.controller,
        "device": rt.device.type,
        "hosts": dict(collections.Counter(r["host"] for r in ranks)),
        "ranks": ranks,
        "images_per_sec": sum(r["images_per_sec"] for r in ranks),
        "epochs": args.epochs,
        "resumed_after_epoch": epochs_done,
        **test_metrics,
        "train_time_s": max(r["train_time_s"] for r in ranks),
        "wall_time_s": wall_seconds,
        "weights_identical": len(set(digests)) == 1,
        "weights_digest": digests[0],
        "rank_digests": digests,
        "options": {k: str(v) if isinstance(v, os.PathLike) else v for k, v in vars(args).items()},
    }

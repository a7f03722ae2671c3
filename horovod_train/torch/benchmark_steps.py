"""The PyTorch trainer's --benchmark-steps mode: the trainer's own network,
data pipeline and Horovod optimizer, timed for a number of steps instead of
trained for epochs (timed_steps.py times them; benchmarks/run_matrix.sh runs
this through horovod_train/pytorch_mnist.py)."""

import horovod.torch as hvd
import torch

from horovod_train.core import console, distributed, mnist, outputs
from horovod_train.core.config import RunConfig
from horovod_train.torch import timed_steps
from horovod_train.torch.models import build_model, input_shape
from horovod_train.torch.precision import amp_name, amp_settings
from horovod_train.torch.trainer import (
    distributed_optimizer,
    init,
    nccl_transport,
    training_batches,
)


def run(config: RunConfig) -> dict:
    """Time --benchmark-steps training steps (after --warmup-steps) with
    Horovod; rank 0 writes every rank's figures to LOG_DIR/benchmark.json."""
    schedule, options, bench = config.schedule, config.framework.torch, config.framework.benchmark
    fp16_allreduce = config.horovod.fp16_allreduce
    rt, device = init(use_cuda=not config.device.no_cuda, threads=config.device.threads,
                      seed=schedule.seed)
    distributed.check_placement(config, rt, device.type == "cuda")
    amp_dtype, use_scaler = amp_settings(device, options.amp)
    log_dir = config.outputs.log_dir
    distributed.check_all_ranks(
        hvd.allgather_object, rt.rank,
        lambda: rt.is_root and outputs.prepare_output_dirs(log_dir, log_dir), "dirs")
    model = build_model(options.model, options.memory_format).to(device)
    if bench.synthetic:
        shape, classes = input_shape(options.model, bench.image_size)
        batches = timed_steps.synthetic_batches(schedule.batch_size, shape, classes, device)
    else:
        train_split = distributed.check_all_ranks(
            hvd.allgather_object, rt.rank,
            lambda: mnist.load_train_test(config.data.data_dir,
                                          download=not config.data.no_download)[0],
            "data")
        batches = timed_steps.every_epoch(training_batches(
            options.data_pipeline, train_split, schedule.batch_size, rt, schedule.seed, device,
            workers=0))
    optimizer = distributed_optimizer(model, schedule.lr, schedule.momentum, fp16_allreduce)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    nccl = nccl_transport(rt, device) if device.type == "cuda" else None
    model.train()
    scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    mine = timed_steps.time_steps(timed_steps.horovod_step(model, optimizer, batches, amp_dtype,
                                                           scaler),
                                  bench.warmup_steps, bench.steps, schedule.batch_size, device)
    per_rank = hvd.allgather_object(mine, name="benchmark")
    record = timed_steps.summarize(per_rank, {
        "launcher": "horovod", "controller": rt.controller, "model": options.model,
        "memory_format": options.memory_format, "amp": amp_name(amp_dtype),
        "workload": "synthetic" if bench.synthetic else "mnist", "device": device.type,
        "data_pipeline": None if bench.synthetic else options.data_pipeline,
        "batch_per_rank": schedule.batch_size, "warmup_steps": bench.warmup_steps,
        "steps": bench.steps, "threads_per_rank": rt.threads,
        "fp16_allreduce": fp16_allreduce,
        "parameters": sum(p.numel() for p in model.parameters()),
        "gradient_bytes": timed_steps.gradient_bytes(model, fp16_allreduce),
        "nccl": nccl,
        # The trainer's step, less what only training needs.
        "leaves_out": "the trainer's loss check (one scalar allreduced per step)",
    }, measures_allreduce=True)
    if rt.is_root:
        timed_steps.write_result(config.outputs.log_dir, record)
        console.say(timed_steps.format_result(record))
    return record

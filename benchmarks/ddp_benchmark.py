"""The baseline: the same timed steps as `pytorch_mnist.py --benchmark-steps`,
with PyTorch DistributedDataParallel under torchrun instead of Horovod, which
is what users would pick instead of Horovod.

    torchrun --nnodes 1 --nproc-per-node 2 benchmarks/ddp_benchmark.py \\
        --benchmark-steps 50 --data-dir data

On several nodes, start torchrun on each with --nnodes, --node-rank,
--master-addr and --master-port (benchmarks/run_matrix.sh does, over ssh).
Rank 0 writes LOG_DIR/benchmark.json in the same format as Horovod's run.
"""

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path

from benchmarks.machine import machine_record
from horovod_train.core import options
from horovod_train.core.errors import ArgumentParser, UserError, run_main
from horovod_train.torch import options as torch_options
from horovod_train.torch.model_names import MEMORY_FORMAT_NAMES, MNIST_MODELS, MODEL_NAMES


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog="ddp_benchmark.py", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--no-download", action="store_true")
    parser.add_argument("--model", choices=sorted(MODEL_NAMES), default="mnist_cnn")
    parser.add_argument("--memory-format", choices=sorted(MEMORY_FORMAT_NAMES),
                        default="channels_last", help=torch_options.MEMORY_FORMAT_HELP)
    parser.add_argument("--amp", choices=torch_options.AMP_CHOICES, default="auto",
                        help=torch_options.AMP_HELP)
    parser.add_argument("--batch-size", type=options.positive_int, default=64,
                        help="images per rank per step")
    parser.add_argument("--lr", type=options.positive_float, default=0.05)
    parser.add_argument("--momentum", type=options.non_negative_float, default=0.9)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-cuda", action="store_true")
    parser.add_argument("--threads", type=options.positive_int, default=None)
    parser.add_argument("--log-dir", type=Path, default=Path("runs") / "ddp_benchmark")
    torch_options.add_benchmark_options(parser)
    args = parser.parse_args(argv)
    if args.benchmark_steps is None:
        parser.error("--benchmark-steps is required")
    problem = torch_options.input_problem(args.model, args.synthetic, True, MNIST_MODELS)
    if problem:
        parser.error(problem)
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    if "RANK" not in os.environ:
        raise UserError("run me under torchrun (it sets RANK, WORLD_SIZE and MASTER_ADDR)")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from horovod_train.core import mnist, outputs, runtime
    from horovod_train.torch import allocator, dataloader, timed_steps
    from horovod_train.torch.models import build_model, input_shape
    from horovod_train.torch.precision import amp_name, amp_settings

    # The trainer's allocator settings, so the two launchers compare alike.
    allocator.keep_freed_memory()
    local_rank = int(os.environ["LOCAL_RANK"])
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    problem = torch_options.amp_problem(args.amp, use_cuda)  # the trainer's rule
    if problem:
        raise UserError(problem)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    threads = runtime.threads_per_rank(int(os.environ["LOCAL_WORLD_SIZE"]), args.threads)
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(minutes=5))
    rank, size = dist.get_rank(), dist.get_world_size()
    try:
        if rank == 0:
            outputs.prepare_output_dirs(args.log_dir, args.log_dir)
        model = build_model(args.model, args.memory_format).to(device)
        if args.synthetic:
            shape, classes = input_shape(args.model, args.image_size)
            batches = timed_steps.synthetic_batches(args.batch_size, shape, classes, device)
        else:
            train_split = mnist.load_train_test(args.data_dir, download=not args.no_download)[0]
            loader, _ = dataloader.train_loader(dataloader.MnistTensors(train_split),
                                                args.batch_size, rank, size, args.seed,
                                                workers=0, pin_memory=False)
            batches = timed_steps.loader_batches(loader, device)
        amp_dtype, use_scaler = amp_settings(device, args.amp)
        # DDP broadcasts rank 0's weights when it wraps the model.
        model = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
        model.train()
        scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
        mine = timed_steps.time_steps(timed_steps.ddp_step(model, optimizer, batches, amp_dtype,
                                                           scaler),
                                      args.warmup_steps, args.benchmark_steps, args.batch_size,
                                      device)
        per_rank = [None] * size
        dist.all_gather_object(per_rank, mine)
        record = timed_steps.summarize(per_rank, {
            "launcher": "ddp", "controller": dist.get_backend(), "model": args.model,
            "memory_format": args.memory_format, "amp": amp_name(amp_dtype),
            "workload": "synthetic" if args.synthetic else "mnist", "device": device.type,
            "batch_per_rank": args.batch_size, "warmup_steps": args.warmup_steps,
            "steps": args.benchmark_steps, "threads_per_rank": threads,
            "fp16_allreduce": False,
            "parameters": sum(p.numel() for p in model.parameters()),
            "gradient_bytes": timed_steps.gradient_bytes(model, compressed=False),
        }, measures_allreduce=False)
        if rank == 0:

            # The Horovod runs' benchmark.json is the product's: run_matrix
            # records the machine in its results.json for those.
            record["machine"] = machine_record()
            timed_steps.write_result(args.log_dir, record)
            print(timed_steps.format_result(record), flush=True)
    except BaseException:
        dist.destroy_process_group()
        raise
    # Every rank is done with its collectives; then leave without tearing
    # gloo down: its teardown at exit can abort a process ("terminate called
    # without an active exception") after the measurement was written.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)



def cli() -> None:
    """The command's entry (benchmarks/ddp_benchmark.py)."""
    run_main(main)


if __name__ == "__main__":
    cli()

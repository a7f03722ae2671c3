"""Allreduce micro-benchmark: bus bandwidth against message size, the way
nccl-tests reports it, for Horovod, torch.distributed and plain MPI side by
side on the same processes and hosts.

For each message size S (bytes of float32) and implementation:

    time   = mean over the measured iterations of the slowest rank's time
             (every iteration starts after a barrier and ends when the
             allreduce has completed on that rank)
    algbw  = S / time                      (GB/s, 1 GB = 1e9 bytes)
    busbw  = algbw * 2(n-1)/n              (n = number of ranks)

busbw is the rate each rank's link must carry: a ring allreduce sends and
receives 2(n-1)/n * S bytes per rank, so busbw does not depend on n and can
be compared with the link rate (--link-gbit) and across implementations.

The implementations, measured one after the other in this order:
    mpi      mpi4py COMM_WORLD.Allreduce on numpy float32 buffers
    torch    torch.distributed.all_reduce: gloo on the CPU, nccl with --cuda
    horovod  horovod.torch.allreduce_ (op Sum) on a float32 tensor
Horovod starts last: once up, its background thread runs MPI collectives
every cycle, which would disturb the other two on a host short of cores.

Launch it with the MPI launcher, so that mpi4py and Horovod share MPI:

    horovodrun --mpi -np 4 -H a:2,b:2 python benchmarks/allreduce_bench.py \\
        --sizes 4K,1M,64M --json allreduce.json --link-gbit 10

or with `horovodrun --gloo` to measure Horovod over its Gloo controller
(and torch): there is no MPI then, so no mpi4py figures.

`python benchmarks/allreduce_bench.py` alone runs one rank. Rank 0 prints
the table and writes --json. Every size is checked once per implementation:
all ranks fill with rank+1 and every element must come back as n(n+1)/2.
"""

import argparse
import json
import os
import platform
import re
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from benchmarks.machine import machine_record
from horovod_train.core import console, runtime
from horovod_train.core.atomic import atomic_write_bytes
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, print_error, run_main
from horovod_train.core.options import non_negative_int, positive_float, positive_int

PROG = "allreduce_bench"
IMPLEMENTATIONS = ("horovod", "torch", "mpi")  # table order
RUN_ORDER = ("mpi", "torch", "horovod")  # Horovod last: see benchmark()
DEFAULT_SIZES = [4096 * 4**k for k in range(8)]  # 4 KiB, 16 KiB, ... 64 MiB
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
FLOAT32 = 4


# --- options ------------------------------------------------------------------

def parse_size(text: str) -> int:
    """'4096', '4K', '4KiB', '1M', '64MB' -> bytes (binary units)."""
    match = re.fullmatch(r"(\d+)\s*([KMG]?)(?:I?B)?", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (like 4096, 4K, 1M, 64M)")
    nbytes = int(match[1]) * UNITS[match[2]]
    if nbytes <= 0:
        raise argparse.ArgumentTypeError(f"size {text!r} must be positive")
    if nbytes % FLOAT32:
        raise argparse.ArgumentTypeError(f"size {text!r} is not a multiple of 4 bytes (float32)")
    return nbytes


def parse_sizes(text: str) -> list[int]:
    return sorted({parse_size(part) for part in text.split(",")})


def parse_implementations(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in IMPLEMENTATIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: choose from {','.join(IMPLEMENTATIONS)}")
    return [name for name in IMPLEMENTATIONS if name in names]  # table order


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=parse_sizes, default=DEFAULT_SIZES,
                        help="comma-separated message sizes in bytes, K/M/G binary units "
                             "(default: powers of 4 from 4K to 64M)")
    parser.add_argument("--iters", type=positive_int, default=20,
                        help="measured iterations per size and implementation (default 20)")
    parser.add_argument("--warmup", type=non_negative_int, default=5,
                        help="unmeasured iterations before them (default 5)")
    parser.add_argument("--max-seconds", type=positive_float, default=10.0,
                        help="cap on the time per size and implementation (default 10): "
                             "large messages run fewer warm-up and measured iterations than "
                             "asked, never fewer than 2 measured; the JSON says how many ran")
    parser.add_argument("--implementations", type=parse_implementations,
                        default=None, metavar="LIST",
                        help="subset of horovod,torch,mpi (default: all three; "
                             "horovod,torch under horovodrun --gloo)")
    parser.add_argument("--cuda", action="store_true",
                        help="tensors on the GPU (local rank's), torch with nccl; "
                             "mpi stays on host buffers")
    parser.add_argument("--link-gbit", type=positive_float, default=None, metavar="X",
                        help="link rate in Gbit/s: also print busbw as a percentage of it")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write settings, environment and results here (rank 0)")
    args = parser.parse_args(argv)
    # Fail now, not after minutes of measuring.
    if args.json is not None and not args.json.resolve().parent.is_dir():
        parser.error(f"--json: directory {args.json.resolve().parent} does not exist")
    return args


# --- the ranks ---------------------------------------------------------------------

class Ranks:
    """The few collectives the benchmark itself needs (barrier, max, gather),
    over MPI under the MPI launcher, or over Horovod itself under Gloo."""

    rank = size = local_rank = 0
    controller = ""

    def barrier(self) -> None: ...
    def allgather(self, value) -> list: ...
    def bcast(self, value): ...
    def maximum(self, values: np.ndarray) -> np.ndarray: ...
    def abort(self) -> None: ...

    def agree(self, error: str | None) -> None:
        """Raise RunFailed on every rank if any rank has an error, so that all
        of them stop with the same message and none is left waiting in a
        collective."""
        errors = [e for e in self.allgather(error) if e]
        if errors:
            raise RunFailed(errors[0])

    def on_all(self, step):
        """Run step() on every rank; if it fails on one, all of them stop."""
        try:
            result, error = step(), None
        except (RunFailed, UserError, OSError) as err:
            result, error = None, f"{err} ({self.where()})"
        self.agree(error)
        return result

    def where(self) -> str:
        return f"rank {self.rank} on {socket.gethostname()}"


class MpiRanks(Ranks):
    """COMM_WORLD of the MPI launcher (horovodrun --mpi, mpirun)."""

    controller = "mpi"

    def __init__(self, mpi):
        self.mpi = mpi
        self.comm = mpi.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.local_rank = self.comm.Split_type(mpi.COMM_TYPE_SHARED).Get_rank()

    def barrier(self) -> None:
        self.comm.Barrier()

    def allgather(self, value) -> list:
        return self.comm.allgather(value)

    def bcast(self, value):
        return self.comm.bcast(value, root=0)

    def maximum(self, values: np.ndarray) -> np.ndarray:
        self.comm.Allreduce(self.mpi.IN_PLACE, values, op=self.mpi.MAX)
        return values

    def abort(self) -> None:
        self.comm.Abort(1)


class HorovodRanks(Ranks):
    """Horovod's own collectives, under horovodrun --gloo, where there is no
    MPI: Horovod is initialised first, and mpi4py cannot be measured."""

    controller = "gloo"

    def __init__(self, hvd, torch):
        self.hvd = hvd
        self.torch = torch
        hvd.init()
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()

    def barrier(self) -> None:
        self.hvd.barrier()

    def allgather(self, value) -> list:
        return self.hvd.allgather_object(value, name="bench.allgather")

    def bcast(self, value):
        return self.hvd.broadcast_object(value, root_rank=0, name="bench.bcast")

    def maximum(self, values: np.ndarray) -> np.ndarray:
        tensor = self.torch.from_numpy(values)
        return self.hvd.allreduce(tensor, op=self.hvd.Max, name="bench.max").numpy()

    def abort(self) -> None:
        # horovodrun --gloo stops every rank when one exits non-zero.
        sys.stderr.flush()
        os._exit(1)


# --- the three implementations -------------------------------------------------

class TorchTensor:
    """A float32 tensor on `device`, reduced in place."""

    def __init__(self, torch, device, count: int):
        self.torch = torch
        self.device = device
        self.tensor = torch.empty(count, dtype=torch.float32, device=device)

    def fill(self, value: float) -> None:
        self.tensor.fill_(value)

    def result(self) -> np.ndarray:
        return self.tensor.cpu().numpy()

    def wait(self) -> None:
        # GPU work is asynchronous: an iteration ends when the device is done.
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


class HorovodAllreduce(TorchTensor):
    def __init__(self, hvd, torch, device, count: int):
        super().__init__(torch, device, count)
        self.hvd = hvd

    def run(self) -> None:
        # allreduce_ returns once the sum is in the tensor.
        self.hvd.allreduce_(self.tensor, op=self.hvd.Sum, name="allreduce_bench")
        self.wait()


class TorchAllreduce(TorchTensor):
    def __init__(self, dist, torch, device, count: int):
        super().__init__(torch, device, count)
        self.dist = dist

    def run(self) -> None:
        self.dist.all_reduce(self.tensor, op=self.dist.ReduceOp.SUM)
        self.wait()


class MpiAllreduce:
    """Out of place, as nccl-tests' default: send buffer -> receive buffer."""

    def __init__(self, ranks: Ranks, count: int):
        self.ranks = ranks
        self.send = np.empty(count, dtype=np.float32)
        self.recv = np.empty(count, dtype=np.float32)

    def fill(self, value: float) -> None:
        self.send.fill(value)
        self.recv.fill(0)

    def result(self) -> np.ndarray:
        return self.recv

    def run(self) -> None:
        self.ranks.comm.Allreduce(self.send, self.recv, op=self.ranks.mpi.SUM)


# --- measuring -----------------------------------------------------------------

def check_sum(ranks: Ranks, impl, name: str, nbytes: int) -> None:
    """Every rank contributes rank+1: every element must be n(n+1)/2."""
    impl.fill(ranks.rank + 1)
    impl.run()
    got, expected = impl.result(), ranks.size * (ranks.size + 1) / 2
    wrong = (got != expected).nonzero()[0]
    error = None
    if len(wrong):
        error = (f"{name} allreduce of {human(nbytes)} gave a wrong sum on {ranks.where()}: "
                 f"{len(wrong)} of {len(got)} elements wrong, element {wrong[0]} is "
                 f"{got[wrong[0]]}, expected {expected:g}")
    ranks.agree(error)
    # Time on zeros: in-place sums of rank+1 would grow n-fold each iteration,
    # up to inf; adding zeros costs the same.
    impl.fill(0.0)


def time_iterations(ranks: Ranks, impl, count: int) -> np.ndarray:
    """Seconds per iteration, of the slowest rank in each."""
    durations = np.zeros(count)
    for i in range(count):
        ranks.barrier()  # start together: time the allreduce, not waiting for peers
        start = time.perf_counter()
        impl.run()
        durations[i] = time.perf_counter() - start
    return ranks.maximum(durations)


def measure(ranks: Ranks, impl, name: str, nbytes: int, args) -> dict:
    check_sum(ranks, impl, name, nbytes)
    # Keep each size under about --max-seconds: at most a fifth of it for
    # warm-up, estimated from one iteration (the first warm-up one), the rest
    # for the measured iterations, estimated from the last warm-up. Every
    # rank sees the same slowest times, so all agree on the counts.
    probe = max(time_iterations(ranks, impl, 1)[0], 1e-9)
    warmup = min(args.warmup, max(1, int(args.max_seconds / 5 / probe)))
    warm = time_iterations(ranks, impl, max(0, warmup - 1))
    estimate = max(warm[-1], 1e-9) if len(warm) else probe
    budget = args.max_seconds - probe - warm.sum()
    iters = min(args.iters, max(2, int(budget / estimate)))
    seconds = float(time_iterations(ranks, impl, iters).mean())
    return row(nbytes, iters, warmup, seconds, ranks.size)


def row(nbytes: int, iters: int, warmup: int, seconds: float, size: int) -> dict:
    algbw = nbytes / seconds / 1e9
    return {"bytes": nbytes, "iters": iters, "warmup": warmup, "time_s": seconds,
            "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(size)}


def bus_factor(size: int) -> float:
    """Bytes each rank's link carries per byte reduced, in a ring allreduce."""
    return 2 * (size - 1) / size


# --- setting up ------------------------------------------------------------------

def rendezvous_address(ranks: Ranks) -> str:
    """Rank 0 picks a free port on its host and tells every rank host:port."""
    hosts = ranks.allgather(socket.gethostname())
    found = error = None
    if ranks.rank == 0:
        try:
            found = f"{master_address(len(set(hosts)) == 1)}:{free_port()}"
        except (UserError, OSError) as err:
            error = f"torch.distributed rendezvous on rank 0: {err}"
    found, error = ranks.bcast((found, error))
    ranks.agree(error)
    return found


def master_address(single_host: bool) -> str:
    if single_host:
        return "127.0.0.1"
    name = socket.gethostname()
    address = socket.gethostbyname(name)
    if address.startswith("127."):
        # Debian maps a host's own name to 127.0.1.1: other hosts cannot reach that.
        raise UserError(f"hostname {name!r} resolves to {address}, which the other hosts "
                        "cannot reach: map it to a routable address in /etc/hosts")
    return address


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def environment(ranks: Ranks, hvd, torch, backend: str | None) -> dict:
    import horovod

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "horovod": horovod.__version__}
    if isinstance(ranks, MpiRanks):
        import mpi4py

        versions.update({
            "mpi4py": mpi4py.__version__,
            "mpi_library": ranks.mpi.Get_library_version().strip("\x00 \n").splitlines()[0],
            "mpi_standard": "{}.{}".format(*ranks.mpi.Get_version()),
        })
    return {
        "world_size": ranks.size,
        "hostnames": ranks.allgather(socket.gethostname()),
        "launcher": ranks.controller,
        "horovod_controller": (("gloo" if hvd.gloo_enabled() else "mpi")
                               if hvd.is_initialized() else None),
        "torch_backend": backend,
        "mpi_settings": {name: os.environ.get(name) for name in runtime.RANK_MPI_SETTINGS},
        "versions": versions,
    }


# --- reporting -------------------------------------------------------------------

def human(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def link_percent(busbw_gbps: float, link_gbit: float) -> float:
    return busbw_gbps * 8 / link_gbit * 100


def format_table(results: dict, link_gbit: float | None) -> str:
    columns = ["time(us)", "algbw", "busbw"] + (["%link"] if link_gbit else [])
    width = 10
    names = list(results)
    lines = [" " * 9 + "".join(f"{name:>{width * len(columns)}}" for name in names),
             f"{'size':>9}" + "".join(f"{c:>{width}}" for _ in names for c in columns)]
    for i, first in enumerate(results[names[0]]):
        cells = []
        for name in names:
            r = results[name][i]
            cells += [f"{r['time_s'] * 1e6:.1f}", f"{r['algbw_gbps']:.3f}",
                      f"{r['busbw_gbps']:.3f}"]
            if link_gbit:
                cells.append(f"{link_percent(r['busbw_gbps'], link_gbit):.1f}")
        lines.append(f"{human(first['bytes']):>9}" + "".join(f"{c:>{width}}" for c in cells))
    lines.append("time: mean per iteration of the slowest rank; algbw, busbw in GB/s (1e9 B/s)")
    return "\n".join(lines)


def summarize(results: dict) -> dict:
    """busbw of each implementation at the largest size, and Horovod's ratios."""
    largest = {name: rows[-1] for name, rows in results.items()}
    busbw = {name: r["busbw_gbps"] for name, r in largest.items()}
    # The busbw ratio, taken from algbw: the same for n > 1 (same bytes, same
    # factor) and still defined for one rank, whose busbw is 0.
    ratios = {f"horovod/{other}": (largest["horovod"]["algbw_gbps"] / largest[other]["algbw_gbps"]
                                   if "horovod" in largest and other in largest else None)
              for other in ("torch", "mpi")}
    nbytes = next(iter(largest.values()))["bytes"]
    return {"bytes": nbytes, "busbw_gbps": busbw, "ratios": ratios}


def format_summary(summary: dict) -> str:
    busbw = ", ".join(f"{name} {value:.3f}" for name, value in summary["busbw_gbps"].items())
    ratios = "".join(f", {pair} = {value:.2f}" for pair, value in summary["ratios"].items()
                     if value is not None)
    return f"busbw GB/s at {human(summary['bytes'])}: {busbw}{ratios}"


# --- main --------------------------------------------------------------------------

def benchmark(args, ranks: Ranks) -> None:
    import horovod.torch as hvd
    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if args.cuda:
        ranks.agree(None if torch.cuda.is_available() else f"--cuda: no GPU on {ranks.where()}")
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
    makers = {
        "horovod": lambda count: HorovodAllreduce(hvd, torch, device, count),
        "torch": lambda count: TorchAllreduce(dist, torch, device, count),
        "mpi": lambda count: MpiAllreduce(ranks, count),
    }
    backend = None
    results = {}
    try:
        for name in sorted(args.implementations, key=RUN_ORDER.index):
            if name == "torch":
                backend = start_torch(ranks, dist, args.cuda)
            if name == "horovod" and not hvd.is_initialized():
                # Only now: Horovod's background thread runs MPI collectives
                # every cycle, and on a host with few cores that made the MPI
                # and gloo times of the others jump several-fold.
                hvd.init()
            # One buffer per size, freed before the next is allocated.
            results[name] = [measure(ranks, makers[name](nbytes // FLOAT32), name, nbytes, args)
                             for nbytes in args.sizes]
        results = {name: results[name] for name in args.implementations}  # table order
        record = {
            "settings": {"sizes": args.sizes, "iters": args.iters, "warmup": args.warmup,
                         "max_seconds": args.max_seconds,
                         "implementations": args.implementations,
                         "measured_in_order": sorted(results, key=RUN_ORDER.index),
                         "device": device.type, "link_gbit": args.link_gbit},
            "environment": environment(ranks, hvd, torch, backend),
            "results": results,
            "summary": summarize(results),
        }
        if ranks.rank == 0:
            # One write: MPI's output forwarding keeps it in one piece.
            console.say(f"{format_table(results, args.link_gbit)}\n"
                        f"{format_summary(record['summary'])}")
        if args.json is not None:

            payload = (json.dumps({**record, "machine": machine_record()}, indent=2)
                       + "\n").encode()
            ranks.on_all(lambda: ranks.rank == 0 and atomic_write_bytes(args.json, payload))
    except RunFailed:  # raised on every rank together (Ranks.agree): all can tear down
        teardown(ranks, hvd, dist)
        raise
    teardown(ranks, hvd, dist)


def start_torch(ranks: Ranks, dist, cuda: bool) -> str:
    backend = "nccl" if cuda and dist.is_nccl_available() else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{rendezvous_address(ranks)}",
                            rank=ranks.rank, world_size=ranks.size,
                            timeout=timedelta(minutes=5))
    return backend


def teardown(ranks: Ranks, hvd, dist) -> None:
    """Every rank is done with its collectives: shut down explicitly rather
    than leave gloo to its teardown at interpreter exit."""
    ranks.barrier()
    if dist.is_initialized():
        dist.destroy_process_group()
    if hvd.is_initialized():
        hvd.shutdown()


def start_ranks(args) -> Ranks:
    """MPI under the MPI launcher; under horovodrun --gloo there is none, and
    Horovod itself carries the benchmark's own collectives."""
    if os.environ.get("HOROVOD_CONTROLLER") == "gloo":
        if args.implementations is not None and "mpi" in args.implementations:
            raise UserError("mpi: needs the MPI launcher (horovodrun --mpi, mpirun); "
                            "under horovodrun --gloo measure horovod,torch")
        args.implementations = args.implementations or ["horovod", "torch"]
        import horovod.torch as hvd
        import torch

        return HorovodRanks(hvd, torch)
    args.implementations = args.implementations or list(IMPLEMENTATIONS)
    # MPI as the trainers run it (Open MPI yielding its core while it waits).
    runtime.use_rank_mpi_settings()
    # mpi4py first: importing MPI initialises it at thread level
    # "multiple"; Horovod then uses that MPI instead of its own.
    from mpi4py import MPI

    return MpiRanks(MPI)


def main() -> int:
    args = parse_args(sys.argv[1:])  # bad options: argparse's message, exit 2
    ranks = None
    try:
        ranks = start_ranks(args)
        benchmark(args, ranks)
        return 0
    except (UserError, RunFailed) as err:  # raised on all ranks alike: rank 0 says it
        if ranks is None or ranks.rank == 0:
            raise
        return 2 if isinstance(err, UserError) else 1
    except Exception as err:  # perhaps on this rank alone
        where = f" ({ranks.where()})" if ranks else ""
        failure = RunFailed(f"{type(err).__name__}: {err}".replace("\n", " ") + where)
        if ranks is not None and ranks.size > 1:
            # The other ranks may be waiting in a collective: say it, then end them all.
            print_error(PROG, failure)
            ranks.abort()
        raise failure from None



def cli() -> None:
    """The command's entry (benchmarks/allreduce_bench.py)."""
    run_main(main, prog=PROG)


if __name__ == "__main__":
    cli()

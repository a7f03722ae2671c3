"""Throughput of one workload on a matrix of layouts, with Horovod and with
torchrun + DDP side by side. Run it through benchmarks/run_matrix.sh;
benchmarks/scaling_tables.py turns the runs into results.json,
scaling.csv, scaling.md and scaling.png.

A layout NxG is N nodes with G ranks (GPUs) each. Every run has the same
batch per rank (weak scaling), a fixed number of warm-up and timed steps and
is repeated; a layout's figure is the median of its repeats. A layout that
fails (no hostfile, too few slots, host unreachable, the run's own error)
gets its one-line reason in the tables; the other layouts still run.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import scaling_tables
from horovod_train.core import runtime
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.core.runtime import command_output
from horovod_train.launch.hosts import Host, host_list, is_local, read_hostfile
from horovod_train.torch import options as torch_options

REPO = Path(__file__).resolve().parents[2]  # the checkout

EMULATE = REPO / "scripts" / "emulate_cluster.sh"
TRAINER = REPO / "horovod_train" / "pytorch_mnist.py"
DDP = REPO / "benchmarks" / "ddp_benchmark.py"
SCHEMA_VERSION = 1
LAYOUT = re.compile(r"^(\d+)x(\d+)$")


def parse_layouts(text: str) -> list[tuple[int, int]]:
    layouts = []
    for item in text.split(","):
        match = LAYOUT.match(item.strip())
        if not match or int(match[1]) < 1 or int(match[2]) < 1:
            raise UserError(f"layout {item.strip()!r}: want NODESxGPUS such as 2x4")
        layouts.append((int(match[1]), int(match[2])))
    return layouts


# --- hosts -------------------------------------------------------------------

def layout_hosts(args, nodes: int, per_node: int) -> list[str]:
    """The node names of a layout: the first N of --hosts, or those of
    hostfiles/NxG, checked to have the slots the layout needs. Hostfile
    names this machine cannot resolve (the emulated a and b, typed bare on
    one machine) leave a one-node layout to this machine and stop a
    larger one with a line saying how to run it; with --emulate the names
    resolve on host a, where the launchers run."""
    if args.hosts:
        if len(args.hosts) < nodes:
            raise UserError(f"needs {nodes} hosts, --hosts gives {len(args.hosts)}")
        names = args.hosts[:nodes]
    else:
        path = args.hostfile_dir / scaling_tables.layout_name(nodes, per_node)
        if not path.is_file():
            raise UserError(f"no hostfile {path}")
        listed = read_hostfile(path)
        if len(listed) < nodes:
            raise UserError(f"{path} lists {len(listed)} hosts, the layout needs {nodes}")
        for host in listed[:nodes]:
            if host.slots < per_node:
                raise UserError(f"{path}: {host.name} has {host.slots} slots, "
                                f"the layout needs {per_node}")
        names = [host.name for host in listed[:nodes]]
        unknown = [] if args.emulate else [name for name in names if not resolves(name)]
        if unknown and nodes == 1:
            names = ["localhost"]
        elif unknown:
            raise UserError(
                f"needs {nodes} nodes, and {path.name} names {', '.join(unknown)}, unknown here: "
                f"name your nodes with --hosts, list them in {path}, or emulate two hosts on "
                "this machine with --emulate")
    if all(is_local(name) for name in names) and args.device == "cuda" and per_node > args.gpus:
        raise UserError(f"needs {per_node} GPUs per node, this machine has {args.gpus} "
                        "(NCCL takes one GPU per rank)")
    return names


def resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return True


# --- commands ----------------------------------------------------------------

def workload_args(args, run_dir: Path) -> list[str]:
    command = ["--benchmark-steps", str(args.steps), "--warmup-steps", str(args.warmup_steps),
               "--batch-size", str(args.batch_size), "--model", args.model,
               "--memory-format", args.memory_format, "--amp", args.amp,
               "--log-dir", str(run_dir)]
    if args.workload == "synthetic":
        command += ["--synthetic", "--image-size", str(args.image_size)]
    else:
        command += ["--data-dir", str(args.data_dir), "--no-download"]
    if args.no_cuda:
        command.append("--no-cuda")
    if args.threads:
        command += ["--threads", str(args.threads)]
    return command


def controller(args, nodes: int) -> str | None:
    """horovodrun's controller for a layout; None leaves horovodrun's choice
    (MPI where Open MPI is installed). With CPU tensors the controller also
    carries the gradients. Across hosts the resnets' tens of MB a step are
    limited by the link, which Gloo's TCP fills more steadily than Open
    MPI's; the MNIST networks' under 1 MB are limited by latency, where
    Horovod's negotiation costs less over MPI (the figures: docs/benchmarks.md).
    Within a host MPI's shared memory wins. On GPUs NCCL carries the
    gradients either way."""
    from horovod_train.torch.models import MNIST_MODELS

    if args.controller != "auto":
        return args.controller
    bandwidth_bound = args.model not in MNIST_MODELS
    return "gloo" if args.device == "cpu" and nodes > 1 and bandwidth_bound else None


def horovod_command(args, hosts: list[str], per_node: int, run_dir: Path) -> list[list[str]]:
    command = [str(Path(sys.executable).parent / "horovodrun"),
               "-np", str(len(hosts) * per_node),
               "-H", host_list([Host(name, per_node) for name in hosts]),
               "-p", str(args.ssh_port)]
    chosen = controller(args, len(hosts))
    if chosen:
        command.append(f"--{chosen}")
    # Horovod's tensor fusion: gradients are batched into buffers of up to
    # this many MB, sent once per cycle; 0 sends each tensor on its own.
    if args.fusion_threshold_mb is not None:
        command += ["--fusion-threshold-mb", str(args.fusion_threshold_mb)]
    if args.cycle_time_ms is not None:
        command += ["--cycle-time-ms", str(args.cycle_time_ms)]
    command += [sys.executable, str(TRAINER), *workload_args(args, run_dir)]
    if args.fp16_allreduce:
        command.append("--fp16-allreduce")
    return [command]


def ddp_commands(args, hosts: list[str], per_node: int, run_dir: Path,
                 port: int) -> list[list[str]]:
    """One torchrun per node, over ssh unless the node is this host; node 0
    is the rendezvous."""
    commands = []
    for node_rank, host in enumerate(hosts):
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)),
                    "--node-rank", str(node_rank), "--nproc-per-node", str(per_node),
                    "--master-addr", hosts[0], "--master-port", str(port),
                    str(DDP), *workload_args(args, run_dir)]
        if is_local(host) and len(hosts) == 1:
            commands.append(torchrun)
        else:
            remote = f"cd {shlex.quote(os.getcwd())} && exec {shlex.join(torchrun)}"
            commands.append(ssh(args, host) + [remote])
    return commands


def ssh(args, host: str) -> list[str]:
    return ["ssh", "-p", str(args.ssh_port), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            host]


def on_cluster(args, command: list[str]) -> list[str]:
    """With --emulate, every command starts on emulated host a."""
    return [str(EMULATE), "exec", "a", "--", *command] if args.emulate else command


# --- running -----------------------------------------------------------------

def run_processes(commands: list[list[str]], timeout_s: float, log_path: Path) -> str | None:
    """Run the commands side by side; None when all exit 0, else the reason."""
    with open(log_path, "wb") as log:
        procs = [subprocess.Popen(c, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True) for c in commands]
        deadline = time.monotonic() + timeout_s
        reason = None
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                reason = (f"exit {failed[0].returncode}" if failed
                          else f"timed out after {timeout_s:.0f} s")
                break
            time.sleep(0.2)
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if reason is None:
            bad = [p for p in procs if p.returncode != 0]
            reason = f"exit {bad[0].returncode}" if bad else None
    return reason


def error_line(log_path: Path) -> str:
    """The most telling line of a failed run's output: a line saying
    'error', else the last non-empty one."""
    lines = [re.sub(r"^\[\d+\]<std(out|err)>:", "", line).strip()
             for line in log_path.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if re.search(r"\w", line)]  # not ===== rules
    for line in lines:
        if re.search(r"error:|unreachable|Permission denied|Could not resolve|"
                     r"terminate called|Signal \d+ \(SIG", line):
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def check_reachable(args, hosts: list[str]) -> None:
    """hosts.check_reachable, the launcher's check, run where horovodrun and
    torchrun will run: on emulated host a with --emulate, whose names
    resolve only there."""
    command = [sys.executable, "-m", "horovod_train.launch.hosts", "-p", str(args.ssh_port), *hosts]
    result = subprocess.run(on_cluster(args, command), cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit {result.returncode}"]
        failure = UserError if result.returncode == 2 else RunFailed
        raise failure(lines[-1].removeprefix("hosts: error: "))


def new_run(args, launcher: str, nodes: int, per_node: int, repeat: int,
            reason: str | None = None, hosts: list[str] | None = None) -> dict:
    """A run's record, failed until it reports its figures."""
    return {"layout": scaling_tables.layout_name(nodes, per_node), "nodes": nodes,
            "ranks_per_node": per_node, "ranks": nodes * per_node, "hosts": hosts,
            "launcher": launcher, "repeat": repeat, "status": "failed", "reason": reason,
            "oversubscribed": oversubscribed(args, nodes, per_node)}


def run_once(args, launcher: str, hosts: list[str], per_node: int, repeat: int, out_dir: Path,
             port: int) -> dict:
    run = new_run(args, launcher, len(hosts), per_node, repeat, hosts=hosts)
    run_dir = out_dir / "runs" / f"{run['layout']}-{launcher}-{repeat}"
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        check_reachable(args, hosts)
    except (UserError, RunFailed, subprocess.TimeoutExpired) as err:
        run["reason"] = str(err)
        return run
    if launcher == "horovod":
        commands = horovod_command(args, hosts, per_node, run_dir)
    else:
        commands = ddp_commands(args, hosts, per_node, run_dir, port)
    commands = [on_cluster(args, c) for c in commands]
    (run_dir / "command.txt").write_text("\n".join(shlex.join(c) for c in commands) + "\n")
    log_path = run_dir / "output.log"
    started = time.monotonic()
    failure = run_processes(commands, args.timeout, log_path)
    run["wall_time_s"] = time.monotonic() - started
    if failure:
        if launcher == "ddp" and len(hosts) > 1:
            cleanup_remote(args, hosts, run_dir)
        run["reason"] = f"{failure}: {error_line(log_path)}"
        return run
    try:
        record = json.loads((run_dir / "benchmark.json").read_text())
    except (OSError, ValueError) as err:
        run["reason"] = f"no benchmark.json: {err}"
        return run
    run.update(status="ok", per_rank=record["per_rank"],
               images_per_sec=record["images_per_sec"], step_time_s=record["step_time_s"],
               allreduce_time_s=record["allreduce_time_s"],
               parameters=record["parameters"], gradient_bytes=record["gradient_bytes"],
               amp=record["amp"],
               device=record["device"], controller=record["controller"])
    return run


def cleanup_remote(args, hosts: list[str], run_dir: Path) -> None:
    """torchrun on the other nodes would wait for the dead one until its own
    timeout: end every process of this run, found by its run directory."""
    for host in hosts:
        command = ["pkill", "-f", str(run_dir)] if is_local(host) else (
            ssh(args, host) + [f"pkill -f {shlex.quote(str(run_dir))}"])
        subprocess.run(on_cluster(args, command), capture_output=True, timeout=60)


def oversubscribed(args, nodes: int, per_node: int) -> bool:
    """More ranks than devices: GPUs per node on GPU runs; on CPU runs the
    cores of a node, or of this machine for emulated nodes (which share it)."""
    if args.device == "cuda":
        return per_node > args.gpus
    cores = os.cpu_count() or 1
    return (nodes * per_node if args.emulate else per_node) > cores


# --- environment -------------------------------------------------------------

def environment(args) -> dict:
    import horovod
    import torch

    cpu_model = next((line.split(":", 1)[1].strip() for line in
                      Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), platform.processor())
    gpus = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if torch.cuda.is_available() else [])
    mpirun = command_output("mpirun", "--version")
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model,
        "cpu_cores": os.cpu_count(),
        "gpus": gpus,
        "network": network(args),
        "python": platform.python_version(),
        "torch": torch.__version__,
        # The GPU stack the runs used; null on CPU runs.
        "cuda": torch.version.cuda if args.device == "cuda" else None,
        "nccl": (".".join(str(part) for part in torch.cuda.nccl.version())
                 if args.device == "cuda" else None),
        "horovod": horovod.__version__,
        "openmpi": mpirun.splitlines()[0] if mpirun else None,
        # As the trainer's summary.json records it (runtime.checkout_commit).
        "git_commit": runtime.checkout_commit(),
    }


def network(args) -> dict:
    if args.emulate:
        return {"kind": "emulated hosts: veth pairs on a Linux bridge",
                "shaping": {"rate": args.link_rate, "delay": args.link_delay}
                if args.link_rate or args.link_delay else None}
    route = None
    remote = next((h for h in (args.hosts or []) if not is_local(h)), None)
    if remote:
        try:
            route = command_output("ip", "route", "get", socket.gethostbyname(remote))
        except OSError:
            route = None
    return {"kind": "hosts as given", "route_to_first_remote_host": route}


# --- main --------------------------------------------------------------------

def settings(args) -> dict:
    return {"workload": args.workload, "model": args.model, "memory_format": args.memory_format,
            "image_size": args.image_size if args.workload == "synthetic" else 28,
            "batch_per_rank": args.batch_size, "amp": args.amp, "warmup_steps": args.warmup_steps,
            "steps": args.steps, "repeats": args.repeats, "device": args.device,
            "launchers": args.launchers, "controller": args.controller,
            "fp16_allreduce": args.fp16_allreduce,
            "fusion_threshold_mb": args.fusion_threshold_mb, "cycle_time_ms": args.cycle_time_ms,
            "emulate": args.emulate,
            "network": ({"rate": args.link_rate, "delay": args.link_delay}
                        if args.link_rate or args.link_delay else None),
            "parameters": None, "gradient_bytes": None}


def run_matrix(args) -> dict:
    layouts = parse_layouts(args.layouts)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results = {"schema_version": SCHEMA_VERSION,
               "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "command": shlex.join(["benchmarks/run_matrix.sh", *args.argv]),
               "settings": settings(args), "environment": environment(args), "runs": []}
    port = 29400 + os.getpid() % 500  # torchrun rendezvous; a new one per run below
    for nodes, per_node in layouts:
        layout = scaling_tables.layout_name(nodes, per_node)
        try:
            hosts = layout_hosts(args, nodes, per_node)
        except UserError as err:
            # One line for the layout; a failed run per launcher for the tables.
            print(f"{layout}: not run: {err}", flush=True)
            results["runs"] += [new_run(args, launcher, nodes, per_node, 0, reason=str(err))
                                for launcher in args.launchers]
            continue
        # The launchers take turns, repeat by repeat, so that a slow spell of
        # a shared machine falls on both and their ratio stays fair.
        for repeat in range(args.repeats):
            for launcher in args.launchers:
                port += 1
                run = run_once(args, launcher, hosts, per_node, repeat, args.out_dir, port)
                results["runs"].append(run)
                print(progress_line(run), flush=True)
                if run["status"] == "ok":
                    results["settings"]["parameters"] = run["parameters"]
                    results["settings"]["gradient_bytes"] = run["gradient_bytes"]
            if all("wall_time_s" not in run for run in results["runs"][-len(args.launchers):]):
                break  # no run started (hosts unreachable): every repeat would fail the same way
        results["rows"] = scaling_tables.summarize(results["runs"], layouts, args.launchers)
        scaling_tables.write_outputs(args.out_dir, results, args.launchers)  # after each layout
    results["rows"] = scaling_tables.summarize(results["runs"], layouts, args.launchers)
    scaling_tables.write_outputs(args.out_dir, results, args.launchers)
    return results


def progress_line(run: dict) -> str:
    head = f"{run['layout']} {run['launcher']} #{run['repeat'] + 1}:"
    if run["status"] != "ok":
        return f"{head} FAILED: {run['reason']}"
    return (f"{head} {run['images_per_sec']:.1f} images/s over {run['ranks']} ranks, "
            f"step {run['step_time_s'] * 1e3:.1f} ms")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog="run_matrix.sh", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", default="1x1,1x2,2x2,2x4",
                        help="comma-separated NODESxGPUS (default: %(default)s)")
    parser.add_argument("--hosts", default=None,
                        help="comma-separated node names (a layout uses the first N); "
                             "default: the layout's file under --hostfile-dir")
    parser.add_argument("--hostfile-dir", type=Path, default=REPO / "hostfiles")
    parser.add_argument("--launchers", default="horovod,ddp",
                        help="horovod, ddp (torchrun + DistributedDataParallel), or both")
    parser.add_argument("--workload", choices=["mnist", "synthetic"], default="mnist",
                        help="MNIST from --data-dir, or synthetic images (for resnet models)")
    parser.add_argument("--model", default=None,
                        help="mnist_cnn (default for mnist) or resnet50 (default for synthetic), "
                             "resnet18, horovod_example")
    parser.add_argument("--image-size", type=int, default=224, help="synthetic image size")
    parser.add_argument("--memory-format", choices=("channels_last", "contiguous"),
                        default="channels_last",
                        help="layout of both launchers' weights (the trainers' default "
                             "channels_last, or contiguous)")
    parser.add_argument("--amp", choices=torch_options.AMP_CHOICES, default="auto",
                        help="both launchers' precision, as the trainer's --amp: "
                             + torch_options.AMP_HELP)
    parser.add_argument("--batch-size", type=int, default=64, help="images per rank per step")
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=REPO / "data",
                        help="MNIST in the torchvision layout (MNIST/raw/), downloaded there "
                             "first when missing")
    parser.add_argument("--controller", choices=["auto", "gloo", "mpi"], default="auto",
                        help="horovodrun's controller; auto (the default): Gloo for the "
                             "resnets on several CPU hosts, whose gradients it moves faster "
                             "over TCP, else horovodrun's own choice (MPI)")
    parser.add_argument("--fp16-allreduce", action="store_true",
                        help="compress gradients to fp16 for the allreduce (Horovod runs)")
    parser.add_argument("--fusion-threshold-mb", type=int, default=None, metavar="MB",
                        help="Horovod's tensor fusion buffer (the trainer's default: 4 "
                             "with CPU tensors, else horovodrun's 128; 0 turns fusion off)")
    parser.add_argument("--cycle-time-ms", type=float, default=None, metavar="MS",
                        help="Horovod's cycle time between fused allreduces "
                             "(horovodrun's default 1)")
    parser.add_argument("--no-cuda", action="store_true", help="run on CPUs even with GPUs")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per rank")
    parser.add_argument("--ssh-port", type=int, default=12345)
    parser.add_argument("--emulate", action="store_true",
                        help="run on the emulated hosts a and b (scripts/emulate_cluster.sh "
                             "up; brought up here if they are not)")
    parser.add_argument("--link-rate", default=None,
                        help="with --emulate: limit the link between the hosts, e.g. 1gbit")
    parser.add_argument("--link-delay", default=None,
                        help="with --emulate: one-way delay, e.g. 1ms (needs netem)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="default: runs/benchmarks/YYYYmmdd-HHMMSS")
    args = parser.parse_args(argv)
    args.argv = argv
    args.launchers = [x.strip() for x in args.launchers.split(",") if x.strip()]
    if not args.launchers or set(args.launchers) - {"horovod", "ddp"}:
        parser.error(f"--launchers {','.join(args.launchers)}: choose from horovod, ddp")
    for name in ("batch_size", "steps", "repeats", "image_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup_steps < 0:
        parser.error("--warmup-steps must be at least 0")
    if args.fusion_threshold_mb is not None and args.fusion_threshold_mb < 0:
        parser.error("--fusion-threshold-mb must be at least 0")
    if args.cycle_time_ms is not None and args.cycle_time_ms <= 0:
        parser.error("--cycle-time-ms must be positive")
    if (args.link_rate or args.link_delay) and not args.emulate:
        parser.error("--link-rate and --link-delay shape the emulated link: add --emulate")
    if args.emulate and args.hosts:
        parser.error("--emulate runs on the emulated hosts a and b: drop --hosts")
    args.model = args.model or ("resnet50" if args.workload == "synthetic" else "mnist_cnn")
    args.hosts = [h.strip() for h in args.hosts.split(",")] if args.hosts else None
    args.out_dir = args.out_dir or (Path("runs") / "benchmarks"
                                    / datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    args.out_dir = args.out_dir.resolve()
    args.data_dir = args.data_dir.resolve()
    try:
        parse_layouts(args.layouts)
    except UserError as err:
        parser.error(str(err))
    return args


def detect_device(args) -> None:
    import torch

    args.gpus = torch.cuda.device_count()
    args.device = "cuda" if args.gpus and not args.no_cuda else "cpu"


def emulated_cluster(args) -> bool:
    """Bring the emulated hosts up unless they are; shape their link. Returns
    whether this run brought them up (and so takes them down)."""
    up = subprocess.run([str(EMULATE), "status"], capture_output=True).returncode != 0
    if up:
        print("run_matrix: bringing up the emulated hosts a and b", flush=True)
        result = subprocess.run([str(EMULATE), "up"], capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
            raise RunFailed(f"emulate_cluster.sh up failed: {detail[0]}")
    if args.link_rate or args.link_delay:
        limits = (["--rate", args.link_rate] if args.link_rate else []) + (
            ["--delay", args.link_delay] if args.link_delay else [])
        result = subprocess.run([str(EMULATE), "shape", *limits], capture_output=True,
                                text=True, timeout=60)
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
            raise RunFailed(f"emulate_cluster.sh shape failed: {detail[0]}")
    return up


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.workload == "mnist":
        from horovod_train.core import mnist  # numpy: not for --help

        # Once, here, before any run: the timed runs never download.
        mnist.ensure_available(args.data_dir, ["train", "test"])
    detect_device(args)
    brought_up = emulated_cluster(args) if args.emulate else False
    try:
        results = run_matrix(args)
    finally:
        if args.emulate and (args.link_rate or args.link_delay):
            subprocess.run([str(EMULATE), "shape", "--off"], capture_output=True, timeout=60)
        if brought_up:
            subprocess.run([str(EMULATE), "down"], capture_output=True, timeout=120)
    print((args.out_dir / "scaling.md").read_text(), end="")
    print(f"run_matrix: wrote results.json, scaling.csv, scaling.md, scaling.png in "
          f"{args.out_dir}")
    if all(row["status"] != "ok" for row in results["rows"]):
        raise RunFailed(f"no layout ran; each one's reason is in {args.out_dir / 'scaling.md'}")
    return 0


def cli() -> None:
    """The command's entry (benchmarks/run_matrix.sh runs this module)."""
    run_main(lambda: main(sys.argv[1:]), prog="run_matrix")


if __name__ == "__main__":
    cli()

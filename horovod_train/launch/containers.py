"""Run the training image on real hosts and horovodrun from the first.

On each host (reached with your own ssh, as usual) a container of the image
starts with host networking, its GPUs, a large /dev/shm and the cluster's
keys mounted read-only; its entrypoint starts sshd on the cluster's port.
Then scripts/launch.sh's launch runs inside the first host's container, as
on bare hosts (launch/pipeline.py): the hosts checked over the containers'
sshd, the preflight with --preflight, the network chosen, then horovodrun,
which reaches the others' containers on that port; the trainer's command
passes through unchanged. The containers are stopped at the end
unless --keep is given.

The keys directory (scripts/cluster_keys.sh) and the data directory must be
at the same path on every host, and so must the checkout, mounted at
/workspace, unless the image carries the code (docker/app.Dockerfile's
horovod-train-app: --workspace none).

--rdma gives the containers the hosts' InfiniBand/RoCE devices, IPC_LOCK and
an unlimited locked-memory limit, without which NCCL's IB transport falls
back to TCP sockets; every host is checked for /dev/infiniband first.
"""

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

# The standard library only, here and in what it imports: it runs under a
# bare python3 too.
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.launch.hosts import (
    IMAGE_SSH_PORT,
    Failed,
    Host,
    check_deadline_s,
    check_reachable,
    first_problem,
    host_list,
    login_timeout_s,
    on_every_host,
    parse_host_list,
    total_slots,
)

REPO = Path(__file__).resolve().parents[2]  # the checkout
CONTAINER = "horovod-train"
RDMA_DEVICES = "/dev/infiniband"
# The host's RDMA devices; IPC_LOCK and no locked-memory limit, so that the
# verbs library can pin (register) the buffers NCCL and UCX send from.
RDMA_RUN_ARGS = ["--device", RDMA_DEVICES, "--cap-add", "IPC_LOCK",
                 "--ulimit", "memlock=-1:-1"]


def start_command(args, hosts: list[Host]) -> list[str]:
    command = [args.engine, "run", "-d", "--rm", "--name", CONTAINER, "--network", "host",
               "--shm-size", args.shm_size,
               "-v", f"{args.keys}:/etc/horovod/keys:ro",
               "-e", f"HVT_CLUSTER_HOSTS={' '.join(host.name for host in hosts)}",
               "-e", f"HVT_SSH_PORT={args.port}"]
    if args.workspace != "none":
        # The checkout is the code; with none, the image's own /workspace is.
        command += ["-v", f"{args.workspace}:/workspace"]
    if args.gpus != "none":
        command += ["--gpus", args.gpus]
    if args.rdma:
        command += RDMA_RUN_ARGS
    if args.data:
        command += ["-v", f"{args.data}:/data:ro"]
    return command + args.run_args + [args.image]


def train_command(args, hosts: list[Host]) -> list[str]:
    """The launch (scripts/launch.sh's, with --preflight where asked) inside
    the first host's container, over the containers' sshd: the hosts as the
    ranks will see them, and one network for the preflight and the ranks."""
    return [args.engine, "exec", CONTAINER, "python", "-m", "horovod_train", "launch",
            *(["--preflight"] if args.preflight else []), "-np", str(total_slots(hosts)),
            "-H", host_list(hosts), "-p", str(args.port), *args.command]


def on(host: str, command: list[str]) -> list[str]:
    return ["ssh", "-o", "BatchMode=yes", host, shlex.join(command)]


def rdma_problem(host: str, login_s: float) -> str | None:
    """None when `host` has RDMA devices to hand its container, else why
    not; its ssh login within `login_s`."""
    result = subprocess.run(on(host, ["test", "-d", RDMA_DEVICES]), capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, timeout=login_s)
    if result.returncode == 0:
        return None
    if result.returncode == 1:  # test's answer: no such directory
        return (f"--rdma: host {host} has no {RDMA_DEVICES} (no RDMA devices, or their "
                "drivers are not loaded: see `ibv_devinfo` there)")
    said = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
    return f"--rdma: checking {RDMA_DEVICES} on host {host} failed: {said}"


def check_rdma(hosts: list[str]) -> None:
    """Every host has /dev/infiniband, checked side by side: one UserError
    naming the first that has not (docker would fail there after the other
    hosts' containers started)."""
    login_s = login_timeout_s()
    verdicts = on_every_host(lambda host: rdma_problem(host, login_s), hosts,
                             check_deadline_s(login_s))
    problems = []
    for host in hosts:
        verdict = verdicts.get(host, Failed(f"--rdma: host {host}: no answer in time"))
        if verdict:
            problems.append(verdict.message if isinstance(verdict, Failed) else verdict)
    first_problem(problems)


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="launch_cluster", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", required=True, help="NAME:SLOTS,... (slots: GPUs per host)")
    parser.add_argument("--image", default="horovod-train")
    parser.add_argument("--keys", required=True, help="cluster key directory on every host")
    parser.add_argument("--data", help="data directory on every host, mounted at /data")
    parser.add_argument("--workspace", default=str(REPO),
                        help="the checkout on every host, mounted at /workspace "
                             "(default: this checkout's path), or none for an image that "
                             "carries the code (horovod-train-app)")
    parser.add_argument("--gpus", default="all", help="docker --gpus value, or none")
    parser.add_argument("--rdma", action="store_true",
                        help="InfiniBand/RoCE: docker run --device /dev/infiniband "
                             "--cap-add IPC_LOCK --ulimit memlock=-1:-1 (each host is "
                             "checked for /dev/infiniband first)")
    parser.add_argument("--run-arg", dest="run_args", metavar="ARG", action="append",
                        default=[],
                        help="one more docker run argument, put before the image; repeat "
                             "for more, and write it with = when it starts with a dash: "
                             "--run-arg=--env=NCCL_DEBUG=INFO")
    parser.add_argument("--shm-size", default="16g")
    parser.add_argument("--port", type=int, default=IMAGE_SSH_PORT,
                        help="the containers' sshd port (default: the image's, %(default)s)")
    parser.add_argument("--engine", default="docker", help="docker or podman on the hosts")
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    parser.add_argument("--preflight", action="store_true",
                        help="check the containers, every pair of hosts and an allreduce "
                             "over the ranks before training, on the network the ranks will "
                             "use (scripts/launch.sh --preflight); a problem ends the run, "
                             "exit 1")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- the trainer command, e.g. python horovod_train/pytorch_mnist.py")
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command:
        raise UserError("give the trainer command after --")
    hosts = parse_host_list(args.hosts, option="--hosts")

    steps = [on(host.name, start_command(args, hosts)) for host in hosts]
    steps.append(on(hosts[0].name, train_command(args, hosts)))
    stops = [] if args.keep else [on(host.name, [args.engine, "stop", CONTAINER])
                                  for host in hosts]
    if args.dry_run:
        print("\n".join(shlex.join(step) for step in steps + stops))
        return 0
    # Every host answers your ssh (its own sshd and ssh_config, not the
    # containers') before any container starts.
    check_reachable([host.name for host in hosts], port=None, identity=None)
    if args.rdma:
        check_rdma([host.name for host in hosts])
    starts = len(hosts)
    try:
        for step in steps[:starts]:
            subprocess.run(step, check=True, stdout=subprocess.DEVNULL)
        # The launch's lines (and its exit code) are the user's, as from launch.sh.
        return subprocess.run(steps[-1]).returncode
    except subprocess.CalledProcessError as err:
        raise RunFailed(f"{shlex.join(err.cmd)} exited {err.returncode}") from None
    finally:
        for stop in stops:
            subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cli() -> None:
    run_main(lambda: main(sys.argv[1:]), prog="launch_cluster")


if __name__ == "__main__":
    cli()

"""How long the network probe takes before a launch: N emulated hosts (with
the decoy interfaces, one of which joins nothing and so waits out its
connect timeout, and optionally a slow second network that gets measured),
the probe run from the first host over ssh as scripts/launch.sh runs it.
Prints each run's seconds and the choice, writes JSON.

    python benchmarks/network_probe.py --hosts 8 --runs 3 --json probe.json

Needs root (it brings the emulated hosts up, and down at the end).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import CHECKOUT
from benchmarks.machine import machine_record
from horovod_train.core.atomic import atomic_write_bytes
from horovod_train.core.errors import ArgumentParser, RunFailed, run_main

EMULATE = CHECKOUT / "scripts" / "emulate_cluster.sh"
HOST_NAMES = "abcdefghijklmnop"

# Run on the first host: the probe over ssh to every host, timed there.
TIMED_PROBE = """
import json, os, sys, time
from horovod_train.launch import hosts, pipeline
from horovod_train.launch.job import Job
names = sys.argv[1].split(",")
started = time.monotonic()
job = Job(tuple(hosts.Host(name, 1) for name in names), len(names))
choice = pipeline.choose_network(job, dict(os.environ))
print(json.dumps({"seconds": time.monotonic() - started, "chosen": choice.title,
                  "left_out": choice.rejected}))
"""


def emulate(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run([str(EMULATE), *args], capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        said = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise RunFailed(f"emulate_cluster.sh {args[0]}: {said}")
    return result


def probe_once(names: list[str], connect_timeout_s: float) -> dict:
    result = subprocess.run(
        [str(EMULATE), "exec", names[0], "--", sys.executable, "-c", TIMED_PROBE,
         ",".join(names)], capture_output=True, text=True, timeout=600, cwd=CHECKOUT,
        env={**os.environ, "HVT_PROBE_CONNECT_TIMEOUT_S": str(connect_timeout_s)})
    if result.returncode != 0:
        said = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise RunFailed(f"the probe failed: {said}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="network_probe.py", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=8, help="emulated hosts (2 to 16)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--second-network", default=None, metavar="RATE",
                        help="every host also on a slow eth2 (e.g. 20mbit), to be measured")
    parser.add_argument("--connect-timeout", type=float, default=3.0,
                        help="HVT_PROBE_CONNECT_TIMEOUT_S for the probe")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not 2 <= args.hosts <= len(HOST_NAMES):
        parser.error(f"--hosts {args.hosts}: want 2 to {len(HOST_NAMES)}")
    if args.runs < 1:
        parser.error("--runs: want at least 1")
    names = list(HOST_NAMES[:args.hosts])
    up = ["up", "--hosts", ",".join(names), "--decoys"]
    if args.second_network:
        up += ["--second-network", args.second_network]
    emulate(*up)
    try:
        runs = [probe_once(names, args.connect_timeout) for _ in range(args.runs)]
    finally:
        emulate("down")
    seconds = [run["seconds"] for run in runs]
    for index, run in enumerate(runs, 1):
        print(f"run {index}: {run['seconds']:.2f} s, chose {run['chosen']}")
    print(f"probe over {args.hosts} hosts: median {statistics.median(seconds):.2f} s "
          f"(min {min(seconds):.2f}, max {max(seconds):.2f}); left out: "
          + "; ".join(f"{title}: {why}" for title, why in runs[-1]["left_out"].items()))
    if args.json:
        record = {"hosts": args.hosts, "decoys": True, "second_network": args.second_network,
                  "connect_timeout_s": args.connect_timeout, "runs": runs,
                  "median_s": statistics.median(seconds), "machine": machine_record()}
        atomic_write_bytes(args.json, (json.dumps(record, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]), prog="network_probe")

"""A real Slurm on one machine, over the emulated hosts a and b of
scripts/emulate_cluster.sh: the controller `ctl` on the hosts' bridge, one
slurmd inside each host, munge for authentication, and accounting (slurmdbd
over a MariaDB server of its own), so that sacct lists jobs and their steps.
For trying scripts/slurm/horovod.sbatch and submit.sh, and for
tests/cluster/test_slurm.py.

Run it through scripts/slurm/local_cluster.sh (needs root, Debian's
slurm-wlm, slurmdbd, mariadb-server and munge, and the emulated hosts up):

    up        write slurm.conf, start munged, slurmctld and the two slurmd,
              wait until both nodes are idle
    env       print `export SLURM_CONF=...` for the Slurm commands
    status    show the nodes and the queue
    down      cancel every job, stop every daemon this started, remove the state

Everything lives in one state directory (HVT_SLURM_STATE_DIR, default
/run/horovod-train-slurm): slurm.conf and slurmdbd.conf, munge's key and
socket, the database's files, the daemons' logs, pid files and spool.
Nothing is installed and no system file is changed: the Slurm commands find
this cluster through SLURM_CONF.

How the daemons run (each detail was needed):
  - munged as the munge user, with a key generated here and its own socket
    (slurm.conf's AuthInfo points Slurm at it);
  - MariaDB's server on this machine's loopback only, on a port of its own,
    with its files in the state directory; slurmdbd beside slurmctld, the
    cluster registered before slurmctld starts;
  - slurmctld in the root network namespace, where the bridge address is,
    under `unshare --uts --mount` with hostname ctl (it refuses to run on a
    host that is not the configured controller) and the hosts' /etc/hosts;
  - slurmd inside each host, entered as emulate_cluster.sh enters it:
    `nsenter --net` (not `ip netns exec`, which remounts /sys and breaks
    slurmd), its hostname, its /etc/hosts and its /etc/ssh (so jobs can ssh
    between the hosts as horovodrun does), and a node-local TmpFS of its
    own (Slurm's PMIx plugin keeps per-step directories there).
"""

import argparse
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.emulation import cluster as emulated_hosts

STATE_DIR = Path(os.environ.get("HVT_SLURM_STATE_DIR", "/run/horovod-train-slurm"))
PARTITION = "hvt"
CONTROLLER = "ctl"
# Not Slurm's defaults (6817, 6818), so a site's own Slurm on this machine is left alone.
SLURMCTLD_PORT = 16817
SLURMD_PORT = 16818
SLURMDBD_PORT = 16819
DATABASE_PORT = 16830  # MariaDB, on 127.0.0.1 only
CPUS_PER_NODE = 2
PACKAGES = ("slurm-wlm", "slurmdbd", "mariadb-server", "munge")
PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmdbd", "sbatch", "scontrol", "sinfo", "sacct",
            "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb-admin")


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None and not Path(f"/usr/sbin/{p}").exists()]


def installed_plugins() -> Path:
    """Debian's Slurm plugin directory (its multiarch library path)."""
    for found in sorted(Path("/usr/lib").glob("*/slurm-wlm/select_cons_tres.so")):
        return found.parent
    raise UserError("no Slurm plugins under /usr/lib/*/slurm-wlm: apt-get install "
                    + " ".join(PACKAGES))


def slurm_conf(state: Path, layout: dict) -> str:
    """slurm.conf for nodes a, b (their addresses from the emulated
    cluster), two CPUs each, one partition; accounting through slurmdbd, no
    cgroups."""
    nodes = "".join(f"NodeName={host} NodeAddr={address} CPUs={CPUS_PER_NODE} State=UNKNOWN\n"
                    for host, address in layout["hosts"].items())
    return f"""\
# Written by scripts/slurm/local_cluster.sh; removed by `down`.
ClusterName=hvt
SlurmctldHost={CONTROLLER}({layout['bridge_address']})
SlurmctldPort={SLURMCTLD_PORT}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again
# (default 120 s). Slurm's least is 5 s; a step here reaches its slurmd
# moments after slurmctld signs its credential.
AuthInfo=socket={state}/munge/munge.socket,cred_expire=5
StateSaveLocation={state}/ctld
# Node-local scratch, as on a real cluster: every slurmd sees its own
# directory here (start()), while /tmp stays shared like a cluster's shared
# filesystem. Slurm's PMIx plugin makes its per-step directories in it, and
# two nodes sharing one would collide.
TmpFS={state}/node-tmp
SlurmctldPidFile={state}/slurmctld.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdSpoolDir={state}/spool/%n
SlurmdPidFile={state}/slurmd-%n.pid
SlurmdLogFile={state}/slurmd-%n.log
PlugStackConfig={state}/plugstack.conf
# Links to the installed plugins (start()): a test takes one away, as on a
# site built without it, without touching the system's files.
PluginDir={state}/plugins
# No cgroups (the emulated hosts share this machine's).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Jobs and steps recorded by slurmdbd (sacct); no usage sampling.
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost={layout['bridge_address']}
AccountingStoragePort={SLURMDBD_PORT}
# With munge, the socket of the munged that slurmdbd's messages use.
AccountingStoragePass={state}/munge/munge.socket
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MailProg=/bin/true
ReturnToService=2
# Short timeouts: a test waits on them.
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
KillWait=5
# A requeued job waits out cred_expire, then for a scheduling pass. The
# backfill pass (every 2 s) runs only after a change of a job or a node, and
# a requeued job turning eligible is none: it waited for the next node ping,
# up to 10 s more. The main pass every second tests it as it turns eligible.
SchedulerParameters=bf_interval=2,sched_interval=1
InactiveLimit=0
# Finished jobs stay visible to `scontrol show job` for 15 minutes (sacct keeps them).
MinJobAge=900
SlurmctldDebug=info
SlurmdDebug=info
{nodes}PartitionName={PARTITION} Nodes={','.join(layout['hosts'])} Default=YES State=UP
"""


def slurmdbd_conf(state: Path, layout: dict) -> str:
    return f"""\
# Written by scripts/slurm/local_cluster.sh; removed by `down`.
AuthType=auth/munge
AuthInfo=socket={state}/munge/munge.socket
DbdHost={CONTROLLER}
DbdAddr={layout['bridge_address']}
DbdPort={SLURMDBD_PORT}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={DATABASE_PORT}
StorageUser=root
StorageLoc=slurm_acct_db
PidFile={state}/slurmdbd.pid
LogFile={state}/slurmdbd.log
"""


def sh(*command: str, env: dict | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip().splitlines()
        raise RunFailed(f"{' '.join(command)}: {output[-1] if output else result.returncode}")
    return result


def slurm_env(state: Path) -> dict:
    return {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}


def as_controller(hosts_file: Path, command: list[str]) -> list[str]:
    """argv that runs `command` as host ctl: its own hostname, and the
    emulated hosts' /etc/hosts (ctl, a, b), so no name goes to DNS."""
    setup = f"mount --bind {hosts_file} /etc/hosts && hostname {CONTROLLER} && exec \"$@\""
    return ["unshare", "--uts", "--mount", "--propagation", "private",
            "sh", "-c", setup, "sh", *command]


def start_munge(state: Path, hosts_file: Path) -> None:
    munge_dir = state / "munge"
    munge_dir.mkdir(mode=0o755)  # munged wants its socket's directory searchable by all
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_user = pwd.getpwnam("munge")
    for path in (munge_dir, key):
        os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
    sh(*as_controller(hosts_file, [
        "runuser", "-u", "munge", "--", "munged", f"--socket={munge_dir}/munge.socket",
        f"--key-file={key}", f"--pid-file={munge_dir}/munged.pid",
        f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/munged.seed"]))


def start_accounting(state: Path, hosts_file: Path, layout: dict) -> None:
    """MariaDB's server with a fresh database directory, slurmdbd over it,
    and the cluster registered, before slurmctld starts."""
    database = state / "database"
    sh("mariadb-install-db", "--no-defaults", f"--datadir={database}", "--user=root",
       "--auth-root-authentication-method=normal", "--skip-test-db", timeout=120)
    log = open(state / "mariadb.log", "w")  # noqa: SIM115 - the server keeps it
    subprocess.Popen(["mariadbd", "--no-defaults", f"--datadir={database}", "--user=root",
                      "--bind-address=127.0.0.1", f"--port={DATABASE_PORT}",
                      f"--socket={state}/mariadb.sock", f"--pid-file={state}/mariadb.pid",
                      "--skip-log-bin", "--innodb-buffer-pool-size=32M"],
                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    ping = ["mariadb-admin", "--no-defaults", "-h127.0.0.1", f"-P{DATABASE_PORT}", "-uroot",
            "ping"]
    deadline = time.monotonic() + 60
    while subprocess.run(ping, capture_output=True, timeout=30).returncode != 0:
        if time.monotonic() > deadline:
            raise RunFailed(f"MariaDB did not answer on 127.0.0.1:{DATABASE_PORT} in 60 s")
        time.sleep(0.2)
    conf = state / "slurmdbd.conf"  # slurmdbd reads it beside SLURM_CONF's slurm.conf
    conf.write_text(slurmdbd_conf(state, layout))
    conf.chmod(0o600)  # slurmdbd refuses a readable one: it may hold the database's password
    env = slurm_env(state)
    sh(*as_controller(hosts_file, ["slurmdbd"]), env=env)
    # slurmdbd answers once its tables exist; adding the cluster waits for that.
    deadline = time.monotonic() + 60
    while True:
        result = subprocess.run(["sacctmgr", "-i", "add", "cluster", "hvt"], capture_output=True,
                                text=True, env=env, timeout=60)
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RunFailed(f"sacctmgr add cluster: {(result.stderr or result.stdout).strip()}")
        time.sleep(0.5)


def wait_for_idle_nodes(state: Path, nodes: list[str], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        result = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True,
                                text=True, env=slurm_env(state), timeout=30)
        states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
        if all(states.get(node) == "idle" for node in nodes):
            return
        time.sleep(0.5)
    raise RunFailed(f"nodes not idle within {timeout_s:.0f} s: {states or 'no answer'} "
                    f"(logs in {state})")


def up(state: Path, emulate_state: Path) -> dict:
    if os.geteuid() != 0:
        raise UserError("needs root (daemons in the emulated hosts' namespaces)")
    missing = missing_programs()
    if missing:
        raise UserError(f"{', '.join(missing)} not found: "
                        f"apt-get install -y {' '.join(PACKAGES)}")
    layout = emulated_hosts.load_layout(emulate_state)
    if layout.get("image"):
        raise UserError("the emulated hosts are image containers; "
                        "bring up plain hosts (scripts/emulate_cluster.sh up)")
    down(state, quiet=True)
    state.mkdir(parents=True, mode=0o755)
    try:
        return start(state, emulate_state, layout)
    except (RunFailed, subprocess.SubprocessError, OSError) as err:
        # A half-started cluster is stopped and removed; its logs' tails are
        # printed first, so that the error stays the last line.
        logs = log_tails(state)
        if logs:
            print(logs.lstrip("\n"), file=sys.stderr)
        down(state, quiet=True)
        raise RunFailed(f"the local Slurm did not come up: {err}") from None


def log_tails(state: Path, lines: int = 5) -> str:
    tails = []
    for log in sorted(state.glob("**/*.log")):
        with contextlib.suppress(OSError):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"\n--- {log.name}:\n" + "\n".join(tail))
    return "".join(tails)


def start(state: Path, emulate_state: Path, layout: dict) -> dict:
    (state / "ctld").mkdir()
    (state / "plugstack.conf").write_text("")  # no SPANK plugins from the system's config
    (state / "plugins").mkdir()
    for plugin in installed_plugins().glob("*.so"):
        (state / "plugins" / plugin.name).symlink_to(plugin)
    (state / "slurm.conf").write_text(slurm_conf(state, layout))
    first_host = next(iter(layout["hosts"]))
    hosts_file = emulate_state / "hosts" / first_host / "hosts"  # ctl, a and b

    start_munge(state, hosts_file)
    start_accounting(state, hosts_file, layout)
    sh(*as_controller(hosts_file, ["slurmctld", "-f", str(state / "slurm.conf")]))
    (state / "node-tmp").mkdir()
    for host in layout["hosts"]:
        (state / "spool" / host).mkdir(parents=True)
        scratch = state / "tmp" / host
        scratch.mkdir(parents=True, mode=0o1777)
        # slurmd runs in the host's own mount namespace: the bind is its alone.
        sh(*emulated_hosts.enter_command(host, emulate_state, [
            "sh", "-c", f"mount --bind {scratch} {state / 'node-tmp'} && exec \"$@\"", "sh",
            "slurmd", "-N", host, "-f", str(state / "slurm.conf")]))
    wait_for_idle_nodes(state, list(layout["hosts"]))
    info = {"state_dir": str(state), "slurm_conf": str(state / "slurm.conf"),
            "partition": PARTITION, "nodes": list(layout["hosts"]),
            "controller": f"{CONTROLLER}({layout['bridge_address']}):{SLURMCTLD_PORT}"}
    (state / "slurm.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


# --- stopping -----------------------------------------------------------------

def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name), from /proc."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            name = text[text.index("(") + 1:text.rindex(")")]
            table[int(stat.parent.name)] = (int(text[text.rindex(")") + 2:].split()[1]), name)
    return table


def slurm_process_trees() -> list[int]:
    """slurmstepd processes and everything under them (the jobs), deepest
    first, so that nothing a job started is left behind."""
    table = process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    ordered: list[int] = []

    def walk(pid: int) -> None:
        for child in children.get(pid, []):
            walk(child)
        ordered.append(pid)

    for pid, (_, name) in table.items():
        if name.startswith("slurmstepd"):
            walk(pid)
    return ordered


def pids_of(state: Path) -> list[int]:
    """The daemons this started, from their pid files (absent ones skipped)."""
    pids = []
    for pid_file in [*state.glob("slurmd-*.pid"), state / "slurmctld.pid",
                     state / "slurmdbd.pid", state / "mariadb.pid",
                     state / "munge" / "munged.pid"]:
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(pid_file.read_text().split()[0]))
    return pids


def stop(pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGTERM, and SIGKILL for what is still running after timeout_s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if emulated_hosts.running(pid)]
            time.sleep(0.1)


def down(state: Path, quiet: bool = False) -> None:
    """Cancel the jobs, stop the daemons and the jobs' step daemons, remove
    the state. Works on a half-started cluster too."""
    if not state.exists():
        if not quiet:
            print("local_cluster: down (nothing was up)")
        return
    if (state / "slurm.conf").exists() and Path(state / "slurmctld.pid").exists():
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(["scancel", "--full", "--quiet", f"--partition={PARTITION}"],
                           env=slurm_env(state), capture_output=True, timeout=15)
    stop(pids_of(state))
    stop(slurm_process_trees(), timeout_s=5.0)
    shutil.rmtree(state, ignore_errors=True)
    if not quiet:
        print("local_cluster: down (daemons stopped, state removed)")


def status(state: Path) -> None:
    if not (state / "slurm.json").exists():
        raise UserError("no local Slurm is up: scripts/slurm/local_cluster.sh up")
    for command in (["sinfo"], ["squeue"]):
        print(subprocess.run(command, capture_output=True, text=True, env=slurm_env(state),
                             timeout=30).stdout, end="")


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="local_cluster.sh", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "env", "status", "down"])
    args = parser.parse_args(argv)
    if args.command == "up":
        info = up(STATE_DIR, emulated_hosts.STATE_DIR)
        print(f"local_cluster: up: nodes {','.join(info['nodes'])} idle in partition "
              f"{info['partition']}, controller {info['controller']}; use Slurm with: "
              f"export SLURM_CONF={info['slurm_conf']}")
    elif args.command == "env":
        if not (STATE_DIR / "slurm.conf").exists():
            raise UserError("no local Slurm is up: scripts/slurm/local_cluster.sh up")
        print(f"export SLURM_CONF={STATE_DIR / 'slurm.conf'}")
    elif args.command == "status":
        status(STATE_DIR)
    else:
        down(STATE_DIR)
    return 0


def cli() -> None:
    run_main(lambda: main(sys.argv[1:]), prog="local_cluster")


if __name__ == "__main__":
    cli()

"""The hosts of a launch, one model for every tool of the project: a `Host`
(name, slots), read from a -H list (`a:2,b:2`) or from a hostfile in
OpenMPI's conventions, and whether each remote host can be reached the way
horovodrun will reach it (name lookup, its SSH port, an ssh login in
BatchMode), all hosts checked side by side within a bounded time.

Hostfiles, as OpenMPI's mpirun reads them and people write them:

    # comments, whole-line or after a host; blank lines
    a                   # a host alone: 1 slot
    b slots=2
    c slots=2 max_slots=4

`max_slots=M` is accepted as OpenMPI reads it: alone it is the host's slots;
beside `slots=N`, N ranks start there (horovodrun never starts more ranks
than slots) and M below N is refused. horovodrun's own hostfile reader takes
none of this but `HOST slots=N` lines, so launchers hand it the -H list of
the hosts read here (`host_list`), never the file.

The SSH port, one rule for every tool that reaches hosts (launch.sh, the
matrix, the Slurm job, the image's hosts): ssh's own configuration decides
(`ssh -G`: ssh_config's `Port`, else 22), and `-p` where given overrides
it; no tool names a port of its own. The one port the project defines is
the image's sshd's, IMAGE_SSH_PORT, for the image's hosts (the containers
that docker/entrypoint.sh starts), which the image's tools pass themselves.

Every problem is a UserError of one line that names the host, or the
hostfile and line, and what is wrong."""

import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from horovod_train.core.errors import ArgumentParser, UserError, run_main
from horovod_train.launch.network import seconds


@dataclass(frozen=True)
class Host:
    name: str
    slots: int

    def __str__(self) -> str:
        return f"{self.name}:{self.slots}"


# horovodrun accepts NAME:SLOTS with NAME of [\w.-]; the sign is matched here
# only to name negative slots as such instead of as a malformed item.
HOST_ITEM = re.compile(r"^([\w.-]+):(-?\d+)$")
HOST_NAME = re.compile(r"^[\w.-]+$")
HOSTFILE_SETTING = re.compile(r"^(slots|max_slots)=(-?\d+)$")
HOSTFILE_SYNTAX = "want HOST, HOST slots=N or HOST slots=N max_slots=M, # starting a comment"

# The image's sshd port. docker/sshd_config, the entrypoint's HVT_SSH_PORT
# default, docker/Dockerfile's EXPOSE and compose.yaml say the same number
# (tests/single/test_compose.py holds them to this one).
IMAGE_SSH_PORT = 12345
CONNECT_TIMEOUT_S = 5  # TCP connect to a host's SSH port, and its greeting
SSH_TIMEOUT_S = 15  # the whole ssh login, ConnectTimeout included (HVT_SSH_LOGIN_TIMEOUT_S)
LOOKUP_TIMEOUT_S = 10  # `ssh -G` and the name lookup
CHECK_MARGIN_S = 15  # all hosts together, side by side: beyond a lookup and a login


def login_timeout_s(env: Mapping[str, str] = os.environ) -> float:
    """How long one host's ssh login may take: HVT_SSH_LOGIN_TIMEOUT_S, else
    SSH_TIMEOUT_S. A site whose logins are slow (a directory lookup, a long
    shell profile) raises it. A UserError of one line for a value that is
    not a number of seconds above 0."""
    try:
        return seconds("HVT_SSH_LOGIN_TIMEOUT_S", env.get("HVT_SSH_LOGIN_TIMEOUT_S"),
                       SSH_TIMEOUT_S)
    except ValueError as err:
        raise UserError(str(err)) from None


def check_deadline_s(login_s: float) -> float:
    """The checks of every host together, side by side, logins of `login_s`."""
    return LOOKUP_TIMEOUT_S + login_s + CHECK_MARGIN_S



def is_local(host: str) -> bool:
    """Hosts that are this machine by name: horovodrun starts their ranks
    without ssh."""
    return host in ("localhost", "127.0.0.1", socket.gethostname())


def host_list(hosts: Iterable[Host]) -> str:
    """[Host('a', 2), Host('b', 2)] -> 'a:2,b:2', horovodrun's -H."""
    return ",".join(str(host) for host in hosts)


def total_slots(hosts: Iterable[Host]) -> int:
    return sum(host.slots for host in hosts)


def check_name(name: str, origin: str) -> None:
    """A host name ssh would read as one of its options ("-oProxyCommand=...")
    is refused: names come from files and variables others may write."""
    if name.startswith("-"):
        raise UserError(f"{origin}: host name {name!r} begins with '-': ssh would read it as "
                        "an option")


def parse_host_list(text: str, option: str = "-H") -> list[Host]:
    """`a:2,b:2` -> [Host('a', 2), Host('b', 2)]; errors name `option`."""
    origin = f"{option} {text}"
    hosts = []
    for item in text.split(","):
        match = HOST_ITEM.match(item.strip())
        if not match:
            raise UserError(f"{origin}: {item.strip()!r} is not HOST:SLOTS "
                            "(want a list such as a:2,b:2)")
        check_name(match[1], origin)
        hosts.append(Host(match[1], int(match[2])))
    for host in hosts:
        if host.slots < 1:
            raise UserError(f"{origin}: host {host.name} has {host.slots} slots; "
                            "each host needs at least 1")
    names = [host.name for host in hosts]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UserError(f"{origin}: names host {', '.join(twice)} more than once")
    return hosts


def parse_hostfile_line(line: str, where: str) -> Host | None:
    """One hostfile line -> its Host, or None for a blank or comment line."""
    text = line.split("#", 1)[0]
    text = re.sub(r"\s*=\s*", "=", text).strip()  # OpenMPI reads `slots = 2` too
    if not text:
        return None
    name, *words = text.split()
    malformed = not HOST_NAME.match(name)
    settings = {}
    for word in words:
        match = HOSTFILE_SETTING.match(word)
        if not match or match[1] in settings:
            malformed = True
            break
        settings[match[1]] = int(match[2])
    if malformed:
        raise UserError(f"{where}: cannot read {line.strip()!r}: {HOSTFILE_SYNTAX}")
    check_name(name, where)
    slots = settings.get("slots", settings.get("max_slots", 1))
    if slots < 1:
        raise UserError(f"{where}: host {name} has {slots} slots; each host needs at least 1")
    if settings.get("max_slots", slots) < slots:
        raise UserError(f"{where}: host {name} has max_slots={settings['max_slots']}, "
                        f"less than its slots={slots}")
    return Host(name, slots)


def read_hostfile(path: str | Path, allow_empty: bool = False) -> list[Host]:
    """A hostfile's hosts, in its order. A file that lists no host is an
    error unless `allow_empty`."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"hostfile {path}: {getattr(err, 'strerror', None) or err}") from None
    hosts: list[Host] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        where = f"hostfile {path}:{number}"
        host = parse_hostfile_line(line, where)
        if host is None:
            continue
        if host.name in first_line:
            raise UserError(f"{where}: host {host.name} is listed again "
                            f"(first on line {first_line[host.name]})")
        first_line[host.name] = number
        hosts.append(host)
    if not hosts and not allow_empty:
        raise UserError(f"hostfile {path} lists no hosts")
    return hosts


def check_process_count(num_proc: int, hosts: list[Host], origin: str) -> None:
    if num_proc < 1:
        raise UserError(f"-np {num_proc}: the number of processes must be at least 1")
    slots = total_slots(hosts)
    if num_proc > slots:
        raise UserError(f"-np {num_proc} is more than the {slots} slots of {origin}: "
                        "lower -np or give the hosts more slots")


# --- reaching the hosts -------------------------------------------------------

@dataclass(frozen=True)
class SshTarget:
    """Where ssh will connect for a host name, after the user's ssh_config."""
    hostname: str
    port: int
    proxied: bool  # a ProxyCommand or ProxyJump: no direct TCP connection to probe


def ssh_target(host: str, port: int | None) -> SshTarget:
    command = ["ssh", "-G", *(["-p", str(port)] if port else []), host]
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=LOOKUP_TIMEOUT_S)
    except FileNotFoundError:
        raise UserError("ssh is not installed: horovodrun needs it to start remote ranks") from None
    settings = dict(line.partition(" ")[::2] for line in result.stdout.splitlines())
    proxied = any(settings.get(key, "none") != "none" for key in ("proxycommand", "proxyjump"))
    return SshTarget(settings.get("hostname", host), int(settings.get("port", port or 22)),
                     proxied)


def local_addresses() -> set[str]:
    # Imported here: the Slurm glue and launch_cluster import this module
    # under a bare python3, which may lack psutil and never gets here.
    import psutil

    return {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}


def probe_ssh_port(host: str, target: SshTarget) -> str | None:
    """None when the port answers with an SSH greeting, else the problem."""
    where = f"host {host} on SSH port {target.port}"
    try:
        conn = socket.create_connection((target.hostname, target.port), timeout=CONNECT_TIMEOUT_S)
    except ConnectionRefusedError:
        return (f"cannot reach {where}: connection refused (no sshd listens there: "
                "is the host's sshd up, and is -p its port?)")
    except TimeoutError:
        return f"cannot reach {where}: no answer within {CONNECT_TIMEOUT_S} s"
    except OSError as err:
        return f"cannot reach {where}: {err.strerror or err}"
    with conn:
        try:
            greeting = conn.recv(256)
        except TimeoutError:
            greeting = b""
        except OSError as err:
            return f"cannot reach {where}: {err.strerror or err}"
    if not greeting:
        return (f"{where} accepted the connection but sent no SSH greeting within "
                f"{CONNECT_TIMEOUT_S} s: is {target.port} its SSH port?")
    if not greeting.startswith(b"SSH-"):
        first = greeting.splitlines()[0].decode(errors="replace")[:60]
        return f"{where} answers, but not with SSH (it sent {first!r}): is -p its SSH port?"
    return None


# The two faults of a host new to a cluster, as ssh's last line says them,
# and their fix.
SSH_FIXES = {
    "Host key verification failed": "its host key is not known here: add it to "
                                    "~/.ssh/known_hosts (ssh-keyscan {target}, checked)",
    "Permission denied": "this host's key is not accepted there: add it to the host's "
                         "~/.ssh/authorized_keys (ssh-copy-id {target}, or "
                         "scripts/cluster_keys.sh)",
}


def ssh_login(host: str, port: int | None, identity: str | None,
              login_s: float) -> str | None:
    """The login horovodrun's own check makes (with our patch: BatchMode,
    the user's host-key checking), once, with a short connect timeout,
    within `login_s`; a fault with a known fix is named with it."""
    command = ["ssh", "-o", "PasswordAuthentication=no", "-o", "BatchMode=yes",
               "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
               *(["-p", str(port)] if port else []), *(["-i", identity] if identity else []),
               host, "true"]
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=login_s)
    except subprocess.TimeoutExpired:
        # Its port answered with a greeting (check_host asks first): the
        # small packets pass, and the login's larger ones did not.
        return (f"ssh to host {host} greeted and then did not finish within {login_s:g} s: "
                "a path that loses full-size packets does this (an MTU mismatch, e.g. jumbo "
                "frames on the hosts, not on the switch: set one MTU on hosts and switches), "
                "as does a login that hangs on the host (its shell profile, DNS lookups); "
                "where logins are only slow, raise HVT_SSH_LOGIN_TIMEOUT_S")
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    target = f"-p {port} {host}" if port else host
    for said, fix in SSH_FIXES.items():
        if lines and said in lines[-1]:
            return f"host {host}: ssh fails ({said}): {fix.format(target=target)}"
    return (f"ssh to host {host} failed (BatchMode, as horovodrun logs in): "
            f"{lines[-1] if lines else f'exit {result.returncode}'}")


def runs_here(host: str, target: SshTarget) -> bool:
    """`host` is this machine by name or by address: horovodrun runs its
    ranks without ssh."""
    if is_local(host):
        return True
    if target.proxied:
        return False
    infos = socket.getaddrinfo(target.hostname, target.port, type=socket.SOCK_STREAM)
    return bool({info[4][0] for info in infos} & local_addresses())


def check_host(host: str, port: int | None, identity: str | None,
               login_s: float) -> str | None:
    """None when horovodrun will be able to start ranks on `host`, else why
    not; its ssh login within `login_s`."""
    if is_local(host):
        return None
    target = ssh_target(host, port)
    try:
        if runs_here(host, target):
            return None
    except socket.gaierror as err:
        alias = f" ({target.hostname})" if target.hostname != host else ""
        return f"host {host}{alias} does not resolve: {err.strerror}"
    if not target.proxied:
        problem = probe_ssh_port(host, target)
        if problem:
            return problem
    return ssh_login(host, port, identity, login_s)


@dataclass(frozen=True)
class Failed:
    """A host's check that failed, and why."""
    message: str


def on_every_host(work: Callable[[str], object], hosts: list[str],
                  deadline_s: float) -> dict[str, object]:
    """work(host) for all hosts side by side, within deadline_s: each host's
    result, or the message of its UserError, OSError or SubprocessError as
    a `Failed`; a host whose work did not end in time is left out."""
    results: dict[str, object] = {}

    def run(host: str) -> None:
        try:
            results[host] = work(host)
        except UserError as err:
            results[host] = Failed(str(err))
        except (OSError, subprocess.SubprocessError) as err:
            results[host] = Failed(f"checking host {host} failed: {err}")

    # Daemon threads: a lookup that hangs past the deadline must not keep
    # this process from exiting.
    threads = [threading.Thread(target=run, args=(h,), daemon=True) for h in hosts]
    for thread in threads:
        thread.start()
    end = time.monotonic() + deadline_s
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    return dict(results)


def first_problem(problems: list[str]) -> None:
    """A UserError naming the first problem, and how many more hosts have one."""
    if problems:
        others = len(problems) - 1
        more = f" (and {others} more host{'s' * (others > 1)} with problems)" if others else ""
        raise UserError(problems[0] + more)


def check_reachable(hosts: list[str], port: int | None, identity: str | None) -> None:
    """Check every host side by side; raise a UserError naming the first
    host (in the order given) that horovodrun could not use."""
    login_s = login_timeout_s()
    deadline_s = check_deadline_s(login_s)
    verdicts = on_every_host(lambda host: check_host(host, port, identity, login_s), hosts,
                             deadline_s)
    problems = []
    for host in hosts:
        if host not in verdicts:
            problems.append(f"host {host}: no answer to the checks within {deadline_s:.0f} s")
        elif verdicts[host]:
            verdict = verdicts[host]
            problems.append(verdict.message if isinstance(verdict, Failed) else verdict)
    first_problem(problems)


def python_on(host: str, port: int | None, identity: str | None, args: list[str],
              cwd: str | Path | None = None, env: dict[str, str] | None = None) -> list[str]:
    """`python ARGS` under the Python at this one's path on `host` (in `cwd`
    there, and with the variables `env`, where given), as horovodrun starts
    ranks: over ssh, in BatchMode with a short connect timeout, unless the
    host is this machine."""
    here = [*(["env", *(f"{name}={value}" for name, value in env.items())] if env else []),
            sys.executable, *args]
    if runs_here(host, ssh_target(host, port)):
        return here
    remote = shlex.join(here) if cwd is None else \
        f"cd {shlex.quote(str(cwd))} && exec {shlex.join(here)}"
    return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            *(["-p", str(port)] if port else []), *(["-i", identity] if identity else []),
            host, remote]


def main(argv: list[str]) -> int:
    """check_reachable as a command, for checks that must run where the
    launch runs: the matrix runs it on emulated host a, the only place whose
    names a and b resolve."""
    parser = ArgumentParser(
        prog="hosts", description="Check that horovodrun can start ranks on each HOST "
        "from here: one line naming the first host it cannot use, and exit 2.")
    parser.add_argument("-p", "--ssh-port", type=int, default=None)
    parser.add_argument("-i", "--ssh-identity-file", default=None)
    parser.add_argument("hosts", nargs="+", metavar="HOST")
    args = parser.parse_args(argv)
    check_reachable(args.hosts, args.ssh_port, args.ssh_identity_file)
    return 0


def cli() -> None:
    """The command's entry (python -m, as the matrix runs it on a host)."""
    run_main(lambda: main(sys.argv[1:]), prog="hosts")


if __name__ == "__main__":
    cli()

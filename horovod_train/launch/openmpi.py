"""Open MPI's settings, in one place for every path that starts ranks: the
project's parameter file (package data; in the checkout a link to the
image's copy in docker/), what the site's own parameter files already set,
what horovodrun's mpirun gives its ranks, and what ranks that srun starts
(no mpirun) get instead, the job's chosen networks among them.

Standard library only: the Slurm job imports it under a bare python3."""

import importlib.resources
import shutil
from pathlib import Path

# The project's Open MPI settings (why: in the file), for launches outside
# the image, whose Open MPI reads them from its own configuration.
MPI_SETTINGS = importlib.resources.files("horovod_train.launch") / "openmpi-mca-params.conf"

# What horovodrun's mpirun puts on its command line for every rank (in the
# project's Horovod: docker/env/patches/*-mpi-without-ofi-btl.patch). Ranks
# that srun starts get them as variables, or each pays the OFI btl's start
# and finish again.
HOROVODRUN_MCA = {"pml": "ob1", "btl": "^openib,ofi"}

# Each layer that carries the ranks' traffic, by its interface variable,
# and the variables Open MPI refuses beside it.
NETWORK_VARIABLES = {
    "HOROVOD_GLOO_IFACE": (),  # Gloo (one interface)
    "NCCL_SOCKET_IFNAME": (),  # NCCL's sockets (and its bootstrap)
    "OMPI_MCA_btl_tcp_if_include": ("OMPI_MCA_btl_tcp_if_exclude",),  # Open MPI's transport
    "OMPI_MCA_oob_tcp_if_include": ("OMPI_MCA_oob_tcp_if_exclude",),  # and its out-of-band
}

# Open MPI's, which take networks in CIDR form, the same on every node
# whatever the interfaces are called there. Gloo and NCCL take names: each
# rank finds its own host's on HVT_NETWORKS (core/runtime.py).
CIDR_VARIABLES = ("OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include")


def read_mca_file(path) -> dict[str, str]:
    """An Open MPI parameter file's `name = value` lines ({} where unreadable)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    settings = {}
    for line in text.splitlines():
        name, equals, value = line.split("#", 1)[0].partition("=")
        if equals:
            settings[name.strip()] = value.strip()
    return settings


def project_environment(path=MPI_SETTINGS) -> dict[str, str]:
    """The project's file as OMPI_MCA_name variables (horovodrun's mpirun
    passes them to its daemons and ranks)."""
    return {f"OMPI_MCA_{name}": value for name, value in read_mca_file(path).items()}


def site_mca_files(env: dict) -> list[Path]:
    """The parameter files Open MPI reads, as it looks for them: the
    installation's (beside the mpirun on PATH; Debian's in /etc/openmpi)
    and the user's, or those OMPI_MCA_mca_param_files names."""
    named = env.get("OMPI_MCA_mca_param_files")
    if named:
        return [Path(item) for item in named.split(":") if item]
    mpirun = shutil.which("mpirun", path=env.get("PATH"))
    prefixes = [Path(mpirun).resolve().parent.parent] if mpirun else []
    found = [prefix / "etc" / "openmpi-mca-params.conf" for prefix in prefixes]
    found.append(Path("/etc/openmpi/openmpi-mca-params.conf"))
    if env.get("HOME"):
        found.append(Path(env["HOME"]) / ".openmpi" / "mca-params.conf")
    return list(dict.fromkeys(found))


def site_mca_settings(env: dict) -> dict[str, str]:
    """What the site's parameter files set (the later file wins, as in Open MPI)."""
    settings: dict[str, str] = {}
    for path in reversed(site_mca_files(env)):
        settings.update(read_mca_file(path))
    return settings


def srun_rank_environment(env: dict, cidrs: list[str] | None = None) -> dict[str, str]:
    """Open MPI settings for ranks started without mpirun (srun's): what
    horovodrun's mpirun gives its ranks and the project's file, and the
    chosen networks `cidrs` (HVT_NETWORKS, and Open MPI's own variables),
    each as a variable where neither the environment nor the site's
    parameter files set it already (an exclude list too: Open MPI refuses
    both)."""
    site = site_mca_settings(env)
    wanted = {**HOROVODRUN_MCA, **read_mca_file(MPI_SETTINGS)}
    chosen = {f"OMPI_MCA_{name}": value for name, value in wanted.items()
              if name not in site and f"OMPI_MCA_{name}" not in env}
    if cidrs:
        chosen["HVT_NETWORKS"] = ",".join(cidrs)
        set_by_site = {f"OMPI_MCA_{name}" for name in site}
        for name in CIDR_VARIABLES:
            if not any(var in env or var in set_by_site
                       for var in (name, *NETWORK_VARIABLES[name])):
                chosen[name] = ",".join(cidrs)
    return chosen


# Of HVT_PORTS's range, the first ports go to Open MPI's out-of-band
# channel: mpirun and each daemon listen on every port of the list they are
# given (seen with Open MPI 4.1), so it gets a few of its own; the rest is
# its TCP transport's, whose ranks take one free port each, as Horovod's
# services and Gloo's pairs do anywhere in the range; but the last port,
# which is the start barrier's (core/start_barrier.py) where srun starts the
# ranks.
OOB_PORTS = 4


def port_range_environment(low: int, high: int) -> dict[str, str]:
    """Open MPI's ports inside HVT_PORTS's range: its out-of-band channel's
    (mpirun's and its daemons') and its TCP transport's listeners."""
    oob_high = min(low + OOB_PORTS - 1, high - 1)
    return {"OMPI_MCA_oob_tcp_dynamic_ipv4_ports": f"{low}-{oob_high}",
            "OMPI_MCA_btl_tcp_port_min_v4": str(oob_high + 1),
            "OMPI_MCA_btl_tcp_port_range_v4": str(max(1, high - oob_high - 1))}


def layers_set(env: dict) -> dict[str, str]:
    """The layers' own interface variables the user set (exclude lists aside)."""
    return {name: env[name] for name in NETWORK_VARIABLES if name in env}

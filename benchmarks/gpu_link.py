"""What links a node's GPUs and what that link should carry, for the
allreduce part of benchmarks/gpu_check.py: read from `nvidia-smi topo -m`
(the path between each pair of GPUs), `nvidia-smi nvlink -s` (each NVLink's
rate) and the GPUs' PCIe generation and width. The rate is the one nccl-tests'
bus bandwidth compares with: what one GPU can send in one direction, so a
ring allreduce's busbw approaches it and never passes it. Standard library
only; the parsers take nvidia-smi's text, so the rules are tested without a
GPU."""

import re
import subprocess

# PCIe's rate per lane and direction after line encoding (GB/s), by generation.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# nvidia-smi's names of a PCIe path between two GPUs, the shortest first:
# one switch (PIX), several (PXB), the CPU's host bridge (PHB), between
# bridges of one NUMA node (NODE), across the CPUs' interconnect (SYS).
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """The path between each pair of GPUs (i < j) in `nvidia-smi topo -m`'s
    matrix: "NV18" (18 NVLinks), or one of PCIE_PATHS."""
    rows = {}
    for line in ANSI.sub("", text).splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]):
            rows[int(cells[0][3:])] = cells[1:]
    pairs = {}
    for i, cells in rows.items():
        for j in range(i + 1, len(rows)):
            if j < len(cells):
                pairs[(i, j)] = cells[j]
    return pairs


def link_of(pairs: dict[tuple[int, int], str]) -> tuple[str, str]:
    """The link a ring over all the GPUs is held to: NVLink where every pair
    has NVLinks (with the fewest links named), else PCIe with the longest
    path any pair takes."""
    paths = list(pairs.values())
    nvlinks = [p for p in paths if re.fullmatch(r"NV\d+", p)]
    if paths and len(nvlinks) == len(paths):
        return "NVLink", min(nvlinks, key=lambda p: int(p[2:]))
    pcie = [p for p in paths if p in PCIE_PATHS]
    return "PCIe", max(pcie, key=PCIE_PATHS.index) if pcie else "unknown"


def nvlink_gbps(text: str) -> float | None:
    """One GPU's NVLinks summed (GB/s per direction) from `nvidia-smi nvlink
    -s -i 0` ("Link 0: 26.562 GB/s" per active link)."""
    rates = [float(rate) for rate in re.findall(r"Link \d+: ([\d.]+) GB/s", text)]
    return sum(rates) if rates else None


def pcie_gbps(generation: int, width: int) -> float | None:
    """A PCIe link's rate per direction (GB/s)."""
    lane = PCIE_LANE_GBPS.get(generation)
    return lane * width if lane and width > 0 else None


def parse_pcie(text: str) -> tuple[int, int] | None:
    """The first GPU's "generation, width" from `nvidia-smi
    --query-gpu=pcie.link.gen.max,pcie.link.width.max --format=csv,noheader`."""
    found = re.match(r"\s*(\d+)\s*,\s*(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def link_record(topology: str, nvlink_status: str, pcie: str) -> dict:
    """The link and its rate from the three texts: kind, nvidia-smi's path,
    and expected_busbw_gbps (None where nvidia-smi did not say)."""
    kind, path = link_of(parse_topology(topology))
    if kind == "NVLink":
        expected = nvlink_gbps(nvlink_status)
    else:
        found = parse_pcie(pcie)
        expected = pcie_gbps(*found) if found else None
        if found:
            path = f"{path}, gen {found[0]} x{found[1]}"
    return {"kind": kind, "path": path, "expected_busbw_gbps": expected}


def nvidia_smi(*arguments: str) -> str:
    try:
        result = subprocess.run(["nvidia-smi", *arguments], capture_output=True, text=True,
                                timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def this_node() -> dict:
    """The link between this node's GPUs, as nvidia-smi reports it."""
    return link_record(nvidia_smi("topo", "-m"), nvidia_smi("nvlink", "-s", "-i", "0"),
                       nvidia_smi("--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                                  "--format=csv,noheader", "-i", "0"))

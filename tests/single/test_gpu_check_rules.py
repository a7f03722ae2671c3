"""The rules of benchmarks/gpu_check.py that need no GPU: which link joins a
node's GPUs and what it should carry, read from nvidia-smi's texts as the
common machines print them; what --check-build reports; which parts run."""

import argparse

import pytest

from benchmarks import CHECKOUT, as_typed, gpu_check, gpu_link

# An 8-GPU NVSwitch node (nvidia-smi topo -m): every pair through 18 links.
NVSWITCH_8 = "\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tNIC0\tCPU Affinity\n" + "".join(
    f"GPU{i}\t" + "\t".join("X" if i == j else "NV18" for j in range(8)) + "\tPXB\t0-55\n"
    for i in range(8)) + "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe\n"
# Four PCIe GPUs on two sockets, one pair bridged by NVLink.
MIXED_4 = """\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\x1b[0m
GPU0\t X \tNV4\tSYS\tSYS\t0-15
GPU1\tNV4\t X \tSYS\tSYS\t0-15
GPU2\tSYS\tSYS\t X \tPIX\t16-31
GPU3\tSYS\tSYS\tPIX\t X \t16-31
"""
NVLINK_STATUS = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n" + "".join(
    f"\t Link {i}: 26.562 GB/s\n" for i in range(18))


def test_every_pair_on_nvlink_is_an_nvlink_node_rated_by_its_links_summed():
    pairs = gpu_link.parse_topology(NVSWITCH_8)
    assert len(pairs) == 28 and set(pairs.values()) == {"NV18"}
    record = gpu_link.link_record(NVSWITCH_8, NVLINK_STATUS, "5, 16\n")
    assert record["kind"] == "NVLink" and record["path"] == "NV18"
    assert record["expected_busbw_gbps"] == pytest.approx(18 * 26.562)


def test_one_pair_without_nvlink_holds_the_ring_to_pcie_and_its_longest_path():
    assert gpu_link.link_of(gpu_link.parse_topology(MIXED_4)) == ("PCIe", "SYS")
    record = gpu_link.link_record(MIXED_4, NVLINK_STATUS, "4, 16\n")
    assert record == {"kind": "PCIe", "path": "SYS, gen 4 x16",
                      "expected_busbw_gbps": pytest.approx(16 * 1.969)}


def test_no_nvidia_smi_answer_leaves_the_rate_unknown():
    assert gpu_link.link_record("", "", "") == {"kind": "PCIe", "path": "unknown",
                                                "expected_busbw_gbps": None}
    assert gpu_link.pcie_gbps(9, 16) is None and gpu_link.pcie_gbps(5, 16) == pytest.approx(63.008)


CHECK_BUILD = """
Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [X] MPI
    [X] Gloo

Available Tensor Operations:
    [X] NCCL
    [ ] DDL
    [ ] CCL
    [X] MPI
    [X] Gloo
"""


def test_check_build_report_is_read_section_by_section():
    assert gpu_check.parse_check_build(CHECK_BUILD) == {
        "horovod": "0.28.1", "frameworks": ["TensorFlow", "PyTorch"],
        "controllers": ["MPI", "Gloo"], "tensor_operations": ["NCCL", "MPI", "Gloo"]}
    assert gpu_check.parse_check_build("Traceback ...")["horovod"] is None


def test_parts_run_in_their_own_order_and_unknown_ones_are_refused():
    assert gpu_check.parse_parts("timeline, build") == ("build", "timeline")
    with pytest.raises(argparse.ArgumentTypeError, match="resnet: choose from build"):
        gpu_check.parse_parts("build,resnet")


def test_records_hold_commands_as_typed_not_this_machines_paths(tmp_path):
    import sys

    command = [sys.executable, str(CHECKOUT / "benchmarks/upstream_mnist.py"),
               "--data-dir", str(tmp_path / "d"), "--json", str(tmp_path / "o" / "r.json")]
    assert as_typed(command, {tmp_path / "o": "OUT", tmp_path / "d": "DATA_DIR"}) == [
        "python", "benchmarks/upstream_mnist.py", "--data-dir", "DATA_DIR", "--json",
        "OUT/r.json"]

"""Whether a GPU host can run the build (horovod_train/gpu/rules.py): the rules
for the driver's CUDA release and the GPU's compute capability, checked
here without a GPU, and the build record the trainer reads them from."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

from horovod_train.gpu import nvidia_driver
from horovod_train.gpu import rules as gpu
from horovod_train.torch import gpu as torch_gpu

# What the default build records: every architecture torch 2.14.1+cu130 has
# native code for, the newest also as PTX.
TORCH_ARCHS = ["75", "80", "86", "90", "100", "120"]


@pytest.mark.parametrize("gpu_name, capability, runs", [
    ("T4", (7, 5), True),
    ("A100", (8, 0), True),
    ("L4 (Ada)", (8, 9), True),  # sm_86 code runs on 8.9: same major, lower minor
    ("H100", (9, 0), True),
    ("B300", (10, 3), True),  # sm_100 code
    ("RTX 5090", (12, 0), True),
    ("a later GPU", (13, 0), True),  # compute_120 PTX, compiled by the driver
    ("V100", (7, 0), False),  # older than every architecture, and than the PTX
    ("Thor", (11, 0), False),  # no 11.x code, and the PTX is newer than 11.0
])
def test_a_gpu_runs_the_default_build_by_cuda_compatibility(gpu_name, capability, runs):
    assert gpu.runs_on(capability, TORCH_ARCHS) is runs, gpu_name


def test_arch_specific_code_runs_on_its_own_gpu_only():
    assert gpu.runs_on((9, 0), ["90a"])
    assert not gpu.runs_on((10, 0), ["80", "90a"])  # the PTX would be compute_90a
    assert not gpu.runs_on((10, 3), ["100a", "120"])


def test_a_gpu_the_build_cannot_run_is_one_line_naming_both():
    message = gpu.architecture_problem((7, 0), "Tesla V100-SXM2-16GB", TORCH_ARCHS)
    assert message == (
        "GPU Tesla V100-SXM2-16GB has compute capability 7.0, and Horovod's CUDA kernels here are "
        "compiled for sm_75, sm_80, sm_86, sm_90, sm_100, sm_120 (PTX compute_120): rebuild with "
        "--cuda-archs 70,... (docker build --build-arg CUDA_ARCHS=...), or train on the CPU with "
        "--no-cuda")
    assert gpu.architecture_problem((9, 0), "H100", TORCH_ARCHS) is None


DRIVER_HINT = ("update the driver (on data-centre GPUs NVIDIA's cuda-compat package also "
               "serves), or train on the CPU with --no-cuda")
VARIANT_HINT = ("set up the CUDA 12 variant for it (scripts/setup.sh --cuda 12, docker build "
                "--build-arg CUDA=12 docker/), ")


@pytest.mark.parametrize("supported, needed, driver, message", [
    (13000, "13.0", "580.65.06", None),
    (13010, "13.0", None, None),  # a newer driver runs older CUDA 13 builds
    (12020, "12.8", "535.104.05", None),  # minor version compatibility: same major
    (12040, "13.0", "550.54.15", "the NVIDIA driver 550.54.15 supports CUDA up to 12.4, and "
                                 "this build of torch and Horovod needs CUDA 13.0 (driver "
                                 "580.65.06 or newer): " + VARIANT_HINT + DRIVER_HINT),
    (12080, "13.0", None, "the NVIDIA driver supports CUDA up to 12.8, and this build of torch "
                          "and Horovod needs CUDA 13.0 (driver 580.65.06 or newer): "
                          + VARIANT_HINT + DRIVER_HINT),
    (11080, "12.8", None, "the NVIDIA driver supports CUDA up to 11.8, and this build of torch "
                          "and Horovod needs CUDA 12.8 (driver 525.60.13 or newer): "
                          + DRIVER_HINT),
])
def test_a_driver_of_an_older_cuda_major_is_one_line(supported, needed, driver, message):
    assert gpu.driver_problem(supported, needed, driver) == message


def test_more_ranks_on_a_host_than_gpus_is_one_line_naming_all_three(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert gpu.gpu_count_problem("a", 4, 2) == (
        "host a runs 4 ranks and sees 2 GPUs (CUDA_VISIBLE_DEVICES='0,1'): one GPU per rank; "
        "give it at most 2 (-H a:2) or more GPUs")
    assert gpu.gpu_count_problem("a", 2, 2) is None
    assert gpu.gpu_count_problem("a", 1, 8) is None


# --- which GPU each rank takes: by identity, not by counting -----------------------

HOST_GPUS = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-dddd"]  # one host's, by UUID


def rank_says(host: str, local_rank: int, given: str | None) -> gpu.Taken:
    """What a rank says of its GPU, from what it was given: CUDA_VISIBLE_DEVICES
    (None: unset, it sees every GPU of the host) and the host's GPUs' UUIDs."""
    visible = HOST_GPUS if given is None else [HOST_GPUS[int(i)] for i in given.split(",")]
    index = gpu.device_index(local_rank, len(visible))
    devices = "CUDA_VISIBLE_DEVICES unset" if given is None else f"CUDA_VISIBLE_DEVICES={given!r}"
    return gpu.Taken(host, visible[index] if index is not None else None, len(visible), devices)


def test_ranks_that_see_every_gpu_take_their_local_ranks():
    taken = [rank_says(host, local, None) for host in "ab" for local in range(4)]
    assert [said.gpu for said in taken[:4]] == HOST_GPUS
    assert gpu.binding_problem(taken) is None


def test_ranks_bound_one_gpu_each_train():
    """Slurm's --gpus-per-task=1, a pod per GPU, a wrapper's per-rank
    CUDA_VISIBLE_DEVICES: each rank sees one GPU, its own."""
    taken = [rank_says(host, local, str(local)) for host in "ab" for local in range(4)]
    assert all(said.visible == 1 for said in taken)
    assert [said.gpu for said in taken[4:]] == HOST_GPUS
    assert gpu.binding_problem(taken) is None


def test_two_ranks_on_one_gpu_are_one_line_naming_host_ranks_and_gpu():
    taken = [rank_says("a", 0, "0"), rank_says("a", 1, "1"), rank_says("b", 0, "2"),
             rank_says("b", 1, "2")]
    assert gpu.binding_problem(taken) == (
        "host b: ranks 2 and 3 both took GPU GPU-cccc (CUDA_VISIBLE_DEVICES='2'): one GPU per "
        "rank; let each rank see every GPU of the host (it takes the one of its local rank) or "
        "bind one each (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank), or run fewer "
        "ranks there")


def test_more_ranks_than_the_gpus_they_see_name_the_host():
    taken = [rank_says("a", local, "0,1") for local in range(4)]
    assert [said.gpu for said in taken] == ["GPU-aaaa", "GPU-bbbb", None, None]
    assert gpu.binding_problem(taken) == (
        "host a runs 4 ranks and sees 2 GPUs (CUDA_VISIBLE_DEVICES='0,1'): one GPU per rank; "
        "give it at most 2 (-H a:2) or more GPUs")


def test_a_gpu_build_without_a_gpu_names_the_host_and_the_way_to_the_cpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    message = gpu.no_gpu_problem("b", driver_found=False)
    assert message.startswith("this Horovod is built for GPUs (NCCL), and host b has none to use "
                              "(no NVIDIA driver is loaded; CUDA_VISIBLE_DEVICES unset)")
    assert message.endswith("or train on the CPU with --no-cuda")


@pytest.mark.parametrize(("nccl_built", "gpus", "problem"), [
    (True, 2, None),
    (False, 0, None),
    (True, 0, "this Horovod is built for GPUs (NCCL), and host b has none to use "
              "(torch finds no CUDA device; CUDA_VISIBLE_DEVICES unset)"),
    # Set up where there were no GPUs (a login node, the test command's
    # environment), run where there are: refused before a GPU tensor reaches it.
    (False, 8, "this Horovod is built for the CPU alone (--gpu-ops none), and host b has "
               "8 GPUs (CUDA_VISIBLE_DEVICES unset): set it up with GPU operations "
               "(scripts/setup.sh --gpu-ops nccl; where setup sees no GPU, --cuda 13 or 12, 12 for "
               "TensorFlow) or train on the CPU with --no-cuda"),
])
def test_the_build_and_the_gpus_a_rank_sees_must_agree(monkeypatch, nccl_built, gpus, problem):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = gpu.build_problem("b", nccl_built, gpus, driver_found=True)
    assert found == problem or (problem and found.startswith(problem)), found


def test_the_build_record_gives_the_architectures(tmp_path):
    assert gpu.built_archs(str(tmp_path)) is None  # a Horovod built elsewhere: no check
    record = tmp_path / gpu.BUILD_RECORD
    record.write_text(json.dumps({"gpu_ops": "none", "cuda_archs": None}))
    assert gpu.built_archs(str(tmp_path)) is None
    record.write_text(json.dumps({"gpu_ops": "nccl", "cuda_archs": "75,80,86,90,100,120"}))
    assert gpu.built_archs(str(tmp_path)) == TORCH_ARCHS


def test_without_an_nvidia_driver_there_is_nothing_to_check():
    """This machine has no GPU; on one with a driver the check runs for real."""
    if nvidia_driver.driver_cuda_version() is not None:
        pytest.skip("an NVIDIA driver is installed here")
    import torch

    torch_gpu.check_driver(torch)  # nothing to refuse


# --- setup's CUDA major, by the driver (docker/env/nvidia_driver.py) ---------------

# The line for a driver that gets the CUDA 12 variant.
CUDA12_SAID = ("the NVIDIA driver {} predates CUDA 13's first driver (580.65.06): setting up "
               "torch for CUDA 12 (its own lock); --cuda 13 after updating the driver")


@pytest.mark.parametrize("driver, cuda, said", [
    ("525.60.13", 12, CUDA12_SAID.format("525.60.13")),
    ("550.54.15", 12, CUDA12_SAID.format("550.54.15")),
    ("570.86.10", 12, CUDA12_SAID.format("570.86.10")),
    ("580.65.06", 13, None),
    ("590.44.01", 13, None),
    (None, None, None),
], ids=["R525", "R550", "R570", "R580", "R590", "no driver"])
def test_setup_takes_the_cuda_the_driver_runs(driver, cuda, said):
    assert nvidia_driver.choose_cuda(driver) == (cuda, said)


def test_a_driver_older_than_every_cuda_is_refused_in_one_line():
    with pytest.raises(ValueError) as refused:
        nvidia_driver.choose_cuda("470.256.02")
    assert str(refused.value) == (
        "the NVIDIA driver 470.256.02 is older than 525.60.13, the first of CUDA 12, the oldest "
        "CUDA of any torch here: update the driver, or set up for the CPU (--gpu-ops none)")


@pytest.mark.parametrize("driver, code, out, err", [
    ("470.256.02", 2, "", "setup.sh: error: the NVIDIA driver 470.256.02 is older than "),
    ("550.54.15", 0, "12\n", "setup.sh: the NVIDIA driver 550.54.15 predates CUDA 13's "),
    ("580.65.06", 0, "13\n", ""),
    ("R580", 2, "", "setup.sh: error: 'R580' is not a driver release such as 580.65.06"),
])
def test_setup_asks_the_rule_in_one_line(driver, code, out, err):
    """As setup.sh runs it, before it installs anything."""
    result = subprocess.run([sys.executable, str(REPO / "docker" / "env" / "nvidia_driver.py"),
                             "--choose-cuda", "--driver", driver],
                            capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout) == (code, out), result.stderr
    assert result.stderr.startswith(err) and result.stderr.count("\n") == (1 if err else 0)

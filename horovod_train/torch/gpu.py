"""The PyTorch trainer's GPU: the one its rank takes, and the rules of
horovod_train/gpu/rules.py asked of torch's view of the host (its driver,
its devices' architectures), each refusal one line before any rank trains."""

from horovod_train.core.errors import UserError
from horovod_train.gpu.nvidia_driver import driver_cuda_version, driver_version
from horovod_train.gpu.rules import (
    Taken,
    architecture_problem,
    binding_problem,
    build_problem,
    built_archs,
    device_index,
    driver_problem,
    visible_devices,
)


def gpu_identity(torch, device) -> str:
    """A GPU's identity across processes that number it apart: its UUID."""
    return f"GPU-{torch.cuda.get_device_properties(device).uuid}"


def take_gpu(hvd, torch, host: str):
    """This rank's GPU (device_index), after every rank has said which it
    took (one allgather) and binding_problem found none: so every rank
    refuses alike, in one line, or none does."""
    visible = torch.cuda.device_count()
    index = device_index(hvd.local_rank(), visible)
    device = torch.device("cuda", index if index is not None else 0)
    mine = Taken(host, gpu_identity(torch, device) if index is not None else None, visible,
                 visible_devices())
    problem = binding_problem(hvd.allgather_object(mine, name="gpus"))
    if problem:
        raise UserError(problem)
    return device


def check_driver(torch) -> int | None:
    """A UserError of one line when the host has an NVIDIA driver too old for
    torch's CUDA (torch would quietly report no GPU); else the CUDA release
    the driver supports, None where there is no driver."""
    supported = driver_cuda_version()
    if supported is None or not torch.version.cuda:
        return supported
    problem = driver_problem(supported, torch.version.cuda, driver_version())
    if problem:
        raise UserError(problem)
    return supported


def check_present(hvd, torch, host: str, driver_cuda: int | None) -> None:
    """The build and the GPUs agree, where the run was asked to use them (no
    --no-cuda), as gpu/rules.py's build_problem says: a build for GPUs falls
    back to the CPU only when asked (a container started without its GPUs
    would otherwise train for hours on the CPU), and a CPU build on a host
    with GPUs is refused before the first GPU tensor reaches it. A UserError
    of one line."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    problem = build_problem(host, hvd.nccl_built(), gpus, driver_cuda is not None)
    if problem:
        raise UserError(problem)


def check_architecture(torch, device) -> None:
    """A UserError of one line when Horovod's kernels cannot run on `device`."""
    archs = built_archs()
    if not archs:
        return
    problem = architecture_problem(torch.cuda.get_device_capability(device),
                                   torch.cuda.get_device_name(device), archs)
    if problem:
        raise UserError(problem)

"""Mixed precision, one rule for every PyTorch step: the trainer's epochs,
its elastic runs, its timed steps and the DDP baseline's (--amp). Nothing
here imports Horovod."""

import contextlib

import torch

from horovod_train.core.errors import UserError

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def amp_settings(device: torch.device, choice: str) -> tuple[torch.dtype | None, bool]:
    """--amp's autocast dtype and whether gradients need loss scaling: auto is
    bf16 where the GPU has it (no scaling needed), else fp16 with a
    GradScaler, and none on the CPU. fp16 on the CPU is refused before
    (config.validate with the placement)."""
    if choice == "auto":
        if device.type != "cuda":
            return None, False
        choice = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if choice == "off":
        return None, False
    if choice == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError(f"--amp bf16: {torch.cuda.get_device_name(device)} has no bfloat16; "
                        "use fp16 or off")
    return AMP_DTYPES[choice], choice == "fp16"


def amp_name(dtype: torch.dtype | None) -> str:
    """What the run records: bf16, fp16 or off."""
    return next((name for name, d in AMP_DTYPES.items() if d == dtype), "off")


def step_reduced(optimizer, scaler) -> None:
    """The optimizer step once Horovod's allreduces were waited for
    (optimizer.synchronize()): unscale where the gradients are scaled, step
    without reducing a second time, update the scale. Horovod's pattern for
    loss scaling, one copy for the trainer's step and the timed steps."""
    if scaler.is_enabled():
        scaler.unscale_(optimizer)
    with optimizer.skip_synchronize():
        scaler.step(optimizer)
    scaler.update()


def autocast(device: torch.device, amp_dtype: torch.dtype | None):
    return (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype
            else contextlib.nullcontext())

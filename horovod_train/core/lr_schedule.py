"""Learning rate for data-parallel training: scaled by the number of workers,
reached by a linear warm-up, then a cosine decay (Goyal et al., 2017: large
minibatch SGD needs the warm-up to stay stable at the scaled rate)."""

import math


def lr_scale(world_size: int, use_adasum: bool, local_size: int, on_gpu: bool) -> float:
    """How much larger the rate is than for one worker. Adasum combines
    gradients without growing their sum, so it needs no scaling across hosts;
    on GPUs it still sums within a host (NCCL), so scale by the local size."""
    if not use_adasum:
        return float(world_size)
    return float(local_size) if on_gpu else 1.0


def learning_rate(
    step: int, steps_per_epoch: int, epochs: int, base_lr: float, scale: float,
    warmup_epochs: float,
) -> float:
    """Rate for optimizer step `step` (0-based, counted from the start of
    training): base_lr at step 0, rising linearly to base_lr * scale after
    warmup_epochs, then following a cosine down to 0 at the last step."""
    total = max(1, steps_per_epoch * epochs)
    warmup = min(total, round(warmup_epochs * steps_per_epoch))
    peak = base_lr * scale
    if step < warmup:
        return base_lr + (peak - base_lr) * step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

"""PyTorch checkpoints: written by rank 0 after each epoch, atomically; on
resume read by rank 0, checked against the model being trained, and handed to
the other ranks by broadcast."""

import io
import os
import pickle
import zipfile
from pathlib import Path

import torch
from torch import nn

from horovod_train.core.array_checkpoint import check_shapes
from horovod_train.core.atomic import atomic_output
from horovod_train.core.errors import UserError

FORMAT = "horovod-train/pytorch-checkpoint/1"
CHECKPOINT_NAME = "checkpoint.pt"


def checkpoint_path(directory: str | os.PathLike) -> Path:
    return Path(directory) / CHECKPOINT_NAME


def save(
    directory: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
    model_name: str, epochs_done: int, extra: dict,
) -> Path:
    """Replace the directory's checkpoint with the state after `epochs_done` epochs."""
    path = checkpoint_path(directory)
    state = {
        "format": FORMAT,
        "model_name": model_name,
        "epochs_done": epochs_done,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "extra": extra,
    }
    # Serialised in memory first: torch.save's zip writer turns a failed
    # write (a full disk) into a RuntimeError that hides the cause, where
    # atomic_output names the file and the reason.
    payload = io.BytesIO()
    torch.save(state, payload)
    with atomic_output(path) as f:
        f.write(payload.getbuffer())
    return path


def load(path: str | os.PathLike) -> dict:
    """Read a checkpoint; a damaged or foreign file is a UserError."""
    try:
        # weights_only: a checkpoint is data, never code to run.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, RuntimeError, EOFError, OSError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path}: not a readable checkpoint ({first_line})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path}: not a checkpoint of this trainer (format {FORMAT} expected)")
    return state


def restore(
    path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
    model_name: str,
) -> int:
    """Load a checkpoint into model and optimizer; returns the epochs it had done."""
    state = load(path)
    if state["model_name"] != model_name:
        raise UserError(
            f"{path} holds model '{state['model_name']}', this run trains '{model_name}'"
        )
    check_fits(path, state["model"], model)
    model.load_state_dict(state["model"])
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (ValueError, KeyError) as err:
        raise UserError(f"{path}: optimizer state does not fit this run: {err}") from None
    return int(state["epochs_done"])


def check_fits(path: str | os.PathLike, saved: dict, model: nn.Module) -> None:
    check_shapes(path, {k: tuple(v.shape) for k, v in saved.items()},
                 {k: tuple(v.shape) for k, v in model.state_dict().items()})


def resume(
    directory: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
    model_name: str,
) -> int:
    """Restore the directory's checkpoint if there is one (rank 0 calls this;
    the caller broadcasts parameters and optimizer state to the others).
    Returns the epochs already done: 0 for a fresh start."""
    path = checkpoint_path(directory)
    return restore(path, model, optimizer, model_name) if path.exists() else 0

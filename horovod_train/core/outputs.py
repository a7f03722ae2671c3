"""A run's output directories (its log directory and checkpoint directory),
made before anything is written, or refused in one line."""

import os
from pathlib import Path

from horovod_train.core.errors import UserError


def prepare_output_dirs(log_dir: Path, checkpoint_dir: Path) -> None:
    """Create the output directories (rank 0 calls this) or say why not.
    Both are checked before either is made, so a refused run leaves nothing."""
    for directory in (log_dir, checkpoint_dir):
        check_can_create(directory)
    for directory in (log_dir, checkpoint_dir):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create {directory}: {err.strerror}") from None
        if not os.access(directory, os.W_OK | os.X_OK):
            raise UserError(f"{directory} is not writable")


def check_can_create(directory: Path) -> None:
    """Judge a directory by its nearest existing ancestor, without making anything."""
    existing = Path(directory).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"cannot create {directory}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot create {directory}: {existing} is not writable")

"""Write files so that a reader sees the old file or the whole new one, never
a part: a temporary file in the same directory, fsync, rename, fsync the
directory. A crash mid-write leaves at most a stray temporary file."""

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from horovod_train.core.errors import UserError


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file that replaces `path` when the block ends. A write that
    fails (a full disk, a directory that is gone) is a one-line UserError
    naming `path`, and leaves the old file as it was."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        # mkstemp makes the file 0600; give it the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> None:
    with atomic_output(path) as f:
        f.write(payload)


def atomic_write_json(path: str | os.PathLike, record) -> None:
    """Indented JSON with a final newline, written atomically, its directory
    made if needed; a place that cannot be written is a one-line UserError."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}") from None
    atomic_write_bytes(path, (json.dumps(record, indent=2) + "\n").encode())

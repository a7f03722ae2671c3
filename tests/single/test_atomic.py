"""Atomic writes: a reader sees the old file or the whole new one, and a
write that fails (a full disk, a directory that is gone) is one line naming
the file, with the old file as it was and no temporary file left."""

import os

import pytest

from horovod_train.core.atomic import atomic_write_bytes, atomic_write_json
from horovod_train.core.errors import UserError


def test_the_new_file_replaces_the_old_one_whole(tmp_path):
    path = tmp_path / "result.bin"
    path.write_bytes(b"old")
    atomic_write_bytes(path, b"new" * 1000)
    assert path.read_bytes() == b"new" * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["result.bin"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would make it


def test_a_full_disk_is_one_line_naming_the_file_and_the_old_file_stays(small_disk):
    path = small_disk / "checkpoint.pt"
    atomic_write_bytes(path, b"x" * 2_000_000)
    with pytest.raises(UserError) as err:
        atomic_write_bytes(path, b"y" * 2_000_000)  # the old file and the new: 4 MB on 3 MiB
    assert str(err.value) == f"cannot write {path}: No space left on device"
    assert path.read_bytes() == b"x" * 2_000_000
    assert [p.name for p in small_disk.iterdir()] == ["checkpoint.pt"]


def test_a_missing_directory_is_one_line(tmp_path):
    path = tmp_path / "gone" / "result.bin"
    with pytest.raises(UserError) as err:
        atomic_write_bytes(path, b"")
    assert str(err.value) == f"cannot write {path}: No such file or directory"


def test_json_makes_its_directory(tmp_path):
    atomic_write_json(tmp_path / "a" / "b.json", {"x": 1})
    assert (tmp_path / "a" / "b.json").read_text() == '{\n  "x": 1\n}\n'

"""horovod_train/torch/allocator.py: a training process keeps the memory a step
frees, instead of glibc handing it back to the kernel and faulting it in
again next step; a user's own allocator choice wins."""

import os
import subprocess
import sys

from conftest import REPO

from horovod_train.torch import allocator

# A fresh process reports, from glibc's own counters (mallinfo2), whether a
# 16 MiB block came from its own mmap and whether the heap kept it (all but
# a MiB) as free memory after free. SETUP runs first.
PROBE = """
import ctypes
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
SETUP
mmaps_before, free_before = libc.mallinfo2().hblks, libc.mallinfo2().fordblks
block = libc.malloc(16 << 20)
own_mmaps = libc.mallinfo2().hblks - mmaps_before
libc.free(block)
kept = libc.mallinfo2().fordblks - free_before >= 15 << 20
print("applied", applied, "own_mmaps", own_mmaps, "kept", kept)
"""


def probe(setup: str, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items()
                   if k != allocator.CHOICE_ENV and not k.startswith("MALLOC_")}
    result = subprocess.run([sys.executable, "-c", PROBE.replace("SETUP", setup)], cwd=REPO,
                            env={**environment, **env}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split("applied", 1)[1].strip()


KEEP = "from horovod_train.torch import allocator; applied = allocator.keep_freed_memory()"


def test_a_step_sized_block_comes_from_the_heap_and_stays_there_after_free():
    assert probe(KEEP) == "True own_mmaps 0 kept True"


def test_glibcs_own_behaviour_maps_the_block_and_hands_it_back():
    """What every step paid before: a fresh mmap, given back at free."""
    assert probe(KEEP, HVT_MALLOC="glibc") == "False own_mmaps 1 kept False"


def test_the_pytorch_trainers_start_keeping_freed_memory():
    setup = ("from horovod_train.torch import trainer; trainer.init(False, 1, 0); "
             "applied = 'by-init'")
    assert probe(setup) == "by-init own_mmaps 0 kept True"

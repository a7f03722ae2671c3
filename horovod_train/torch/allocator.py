"""glibc malloc settings for a CPU training process.

By default glibc serves each allocation above a moving threshold (128 KiB at
first) with its own mmap and returns it to the kernel on free, and gives back
the top of its heap whenever more than 128 KiB there is free. A training step
allocates and frees the same few megabytes of activations and gradients every
step, so every step pays for fresh pages: page faults and zeroing in the
kernel, a large share of a small network's CPU time. Kept instead, the
memory is reused: steps are faster, and their time no longer varies from
process to process with where glibc's moving threshold happens to settle
(benchmarks/horovod_settings.py, variant glibc-malloc against the default;
figures in docs/benchmarks.md, "Horovod's settings on few cores").

The cost: memory a step freed stays with the process (up to TRIM_THRESHOLD
at the top of the heap) for the next step to reuse, instead of going back to
the kernel between steps.
"""

import ctypes
import ctypes.util
import os
import platform

from horovod_train.core import runtime

# mallopt parameter numbers, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

# glibc refuses a larger mmap threshold on 64-bit (HEAP_MAX_SIZE / 2); a
# ResNet-18 activation of a 64-image batch at 32x32 is 16 MiB.
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 1024 * 1024 * 1024

# HVT_MALLOC=glibc leaves glibc's own behaviour (to compare, or to
# hand memory back between steps).
CHOICE_ENV = "HVT_MALLOC"

# Where a user chose an allocator or its settings, theirs wins.
USER_ALLOCATOR_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                      "MALLOC_MMAP_MAX_")


def user_chose_allocator(env=os.environ) -> bool:
    """True when the environment asks for glibc's own behaviour, sets glibc
    malloc's knobs, or preloads another malloc (jemalloc, tcmalloc)."""
    return (env.get(CHOICE_ENV) == "glibc"
            or any(name in env for name in USER_ALLOCATOR_ENV)
            or "glibc.malloc." in env.get("GLIBC_TUNABLES", "")
            or "malloc" in env.get("LD_PRELOAD", ""))


def keep_freed_memory() -> bool:
    """Set this process's glibc malloc to keep what it frees (see the module
    text). Returns whether it did: not on another C library, nor where the
    user chose their own allocator settings."""
    if platform.libc_ver()[0] != "glibc":
        return False
    if user_chose_allocator():
        runtime.record_setting("malloc", os.environ.get(CHOICE_ENV) or "the user's", "user")
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    # Setting either threshold also stops glibc's moving mmap threshold.
    kept = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if kept:
        runtime.record_setting("malloc", "keeps freed memory", "project")
    return kept

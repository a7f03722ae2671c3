"""horovod_train/torch/allocator.py: a training process keeps the memory a step
frees, instead of glibc handing it back to the kernel and faulting it in
again next step; a user's own allocator choice wins."""


import pytest

from horovod_train.torch import allocator


@pytest.mark.parametrize("env", [
    {"HVT_MALLOC": "glibc"},
    {"MALLOC_TRIM_THRESHOLD_": "0"},
    {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"},
    {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
], ids=["asked-for-glibc", "malloc-env", "glibc-tunables", "preloaded-malloc"])
def test_a_users_own_allocator_choice_wins(env):
    assert allocator.user_chose_allocator(env)


def test_unrelated_settings_leave_the_choice_to_the_trainer():
    assert not allocator.user_chose_allocator(
        {"HVT_MALLOC": "keep", "GLIBC_TUNABLES": "glibc.pthread.rseq=0",
         "LD_PRELOAD": ""})

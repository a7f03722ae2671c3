"""Learning rate: scaled by workers, warmed up linearly, decayed by a cosine."""

import math

import pytest

from horovod_train.core.lr_schedule import learning_rate, lr_scale


def test_scale_is_the_number_of_workers_when_averaging():
    assert lr_scale(8, use_adasum=False, local_size=4, on_gpu=True) == 8


def test_adasum_scales_by_local_size_on_gpu_and_not_on_cpu():
    assert lr_scale(8, use_adasum=True, local_size=4, on_gpu=True) == 4
    assert lr_scale(8, use_adasum=True, local_size=4, on_gpu=False) == 1


def rates(**overrides):
    settings = dict(steps_per_epoch=10, epochs=5, base_lr=0.1, scale=4.0, warmup_epochs=1.0)
    settings.update(overrides)
    return [learning_rate(step, **settings) for step in range(50)]


def test_warmup_rises_linearly_from_base_to_scaled_rate():
    lr = rates()
    assert lr[0] == pytest.approx(0.1)
    assert lr[5] == pytest.approx(0.1 + 0.3 * 5 / 10)
    assert lr[10] == pytest.approx(0.4)  # peak right after warm-up
    assert all(a < b for a, b in zip(lr[:10], lr[1:11], strict=True))


def test_cosine_decays_after_warmup_towards_zero():
    lr = rates()
    assert all(a >= b for a, b in zip(lr[10:], lr[11:], strict=False))
    assert lr[30] == pytest.approx(0.4 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr[-1] < 0.01


def test_no_warmup_starts_at_the_peak():
    assert rates(warmup_epochs=0)[0] == pytest.approx(0.4)


def test_warmup_longer_than_training_never_exceeds_the_peak():
    lr = rates(warmup_epochs=100)
    assert max(lr) <= 0.4 + 1e-12

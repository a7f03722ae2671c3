"""Horovod's TensorFlow and Keras parts with Keras 3 (horovod#4290), on the
environment's own build: the cases of keras3_cases.py on two ranks started
by horovodrun over Gloo (the patch is in Horovod's Python, below the
controller; the trainer's runs cover MPI). Unpatched 0.28.1 fails each case:
broadcast ("'SymbolicTensor' object has no attribute 'assign'"), gradient
tape ("'Variable' object has no attribute 'ref'"), fit with the callbacks
("module 'keras.backend' has no attribute 'get_value'")."""

import os
import subprocess

import pytest
from conftest import BIN, REPO, require_framework

pytestmark = pytest.mark.slow


def test_keras_3_broadcast_gradient_tape_and_fit_with_the_callbacks():
    require_framework("TensorFlow")
    result = subprocess.run(
        [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
         str(BIN / "python"), "tests/keras3_cases.py"],
        cwd=REPO, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    for case in ("broadcast", "gradient-tape", "fit"):
        assert f"CASE {case} ok (keras 3." in output, output[-4000:]

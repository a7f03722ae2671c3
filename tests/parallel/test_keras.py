"""Horovod's TensorFlow and Keras parts with Keras 3 (horovod#4290) and
with tf-keras, the Keras 2 that Keras 2 scripts run on, on the environment's
own build: the cases of keras_cases.py on two ranks started by horovodrun
over Gloo (the patch is in Horovod's Python, below the controller; the
trainer's runs cover MPI). Unpatched 0.28.1 fails each case on Keras 3:
broadcast ("'SymbolicTensor' object has no attribute 'assign'"), gradient
tape ("'Variable' object has no attribute 'ref'"), fit with the callbacks
("module 'keras.backend' has no attribute 'get_value'"); on tf-keras, the
Keras 3 patch once failed hvd.DistributedOptimizer ("module
'tf_keras.api._v2.keras' has no attribute '__version__'")."""

import os
import subprocess

import pytest
from conftest import BIN, REPO, require_framework

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("keras, legacy", [("3.", "0"), ("2.", "1")], ids=["keras-3", "tf-keras"])
def test_broadcast_gradient_tape_and_fit_with_the_callbacks(keras, legacy):
    require_framework("TensorFlow")
    result = subprocess.run(
        [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
         str(BIN / "python"), "tests/keras_cases.py"],
        cwd=REPO, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
                       "TF_USE_LEGACY_KERAS": legacy},
        capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    for case in ("broadcast", "gradient-tape", "fit"):
        assert f"CASE {case} ok (keras {keras}" in output, output[-4000:]

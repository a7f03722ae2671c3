"""Horovod's TensorFlow and Keras parts with Keras 3 (horovod#4290) and
with tf-keras, the Keras 2 that Keras 2 scripts run on, on the environment's
own build: the cases of keras_cases.py on two ranks started by
scripts/launch.sh (horovodrun, the project's Open MPI settings with it, as
for a user's script), Keras 3 over MPI and tf-keras over Gloo (the patches are in Horovod's
Python, above the controller; the TensorFlow trainer's runs take Keras 3
over both). Unpatched 0.28.1 fails each case on Keras 3:
broadcast ("'SymbolicTensor' object has no attribute 'assign'"), gradient
tape ("'Variable' object has no attribute 'ref'"), fit with the callbacks
("module 'keras.backend' has no attribute 'get_value'"); on tf-keras, the
Keras 3 patch once failed hvd.DistributedOptimizer ("module
'tf_keras.api._v2.keras' has no attribute '__version__'"). On Keras 3,
hvd.SyncBatchNormalization failed at its construction ("Unrecognized keyword
arguments ... {'fused': False}"), then never moved its statistics, and the
broadcast callback refused Keras 3 variables as local ones ("All local
variables must be of tf.Variable type."), DistributedOptimizer refused
backward_passes_per_step > 1 ("not supported with Keras 3 optimizers"),
PartialDistributedOptimizer's compute_gradients() failed ("'super' object
has no attribute 'compute_gradients'") and KerasState a plain optimizer
("'list' object is not callable")."""

import os
import subprocess
import sys

import pytest
from conftest import BIN, REPO, require_framework

sys.path.insert(0, str(REPO / "docker" / "env"))
import keras_choice  # noqa: E402

pytestmark = pytest.mark.slow



def keras_2_python(tmp_path) -> str:
    """An interpreter of a venv set up with --keras 2: a new venv whose
    packages are this one's (a path line), with keras_choice.py's line."""
    venv = tmp_path / "keras-2"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = str(venv / "bin" / "python")
    hook = keras_choice.choose(python, "2")
    (hook.parent / "tests-packages-of-the-test-venv.pth").write_text(
        "".join(f"{p}\n" for p in sys.path if p.endswith("site-packages")))
    return python


@pytest.mark.parametrize("keras, controller", [("3.", "mpi"), ("2.", "gloo")],
                         ids=["keras-3", "tf-keras"])
def test_broadcast_gradient_tape_and_fit_with_the_callbacks(tmp_path, keras, controller):
    """tf-keras: in a venv of setup.sh --keras 2, no variable handed on."""
    require_framework("TensorFlow")
    python = str(BIN / "python") if keras == "3." else keras_2_python(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    result = subprocess.run(
        [str(REPO / "scripts" / "launch.sh"), "-np", "2", "-H", "localhost:2",
         f"--{controller}", python, "tests/keras_cases.py"],
        cwd=REPO, env={**env, "PATH": f"{BIN}:{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    cases = ["broadcast", "gradient-tape", "fit", "sync-batch-norm", "partial-tape",
             "local-variables", "aggregation", "elastic-state", "elastic-run", "optimizer-options",
             "process-sets"]
    for case in cases + (["partial-optimizer"] if keras == "3." else []):
        assert f"CASE {case} ok (keras {keras}" in output, output[-4000:]

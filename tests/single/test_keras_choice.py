"""The Keras choice (setup.sh --keras, the image's KERAS, build_image.sh
--keras): its refusals before anything installs, and the line it leaves in
a venv, which sets TF_USE_LEGACY_KERAS=1 in each of the venv's processes.
The Keras 2 route under horovodrun is test_keras.py's tf-keras case."""

import subprocess
import sys

import pytest
from conftest import REPO

from horovod_train.image import build as image_build

sys.path.insert(0, str(REPO / "docker" / "env"))
import keras_choice  # noqa: E402

SETUP = REPO / "docker" / "env" / "setup.sh"


def setup_check(tmp_path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SETUP), "--venv", str(tmp_path / "venv"), "--gpu-ops", "none",
                           *options, "--check-options"],
                          env={"PATH": "/usr/bin:/bin", "HVT_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=30)


def test_setup_takes_keras_2_with_tensorflow(tmp_path):
    result = setup_check(tmp_path, "--frameworks", "pytorch,tensorflow", "--keras", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("setup.sh: would set up pytorch,tensorflow, GPU operations none, "
                             "CUDA 13, Keras 2\n")
    assert result.stderr == ""


@pytest.mark.parametrize("options, message", [
    (["--frameworks", "pytorch", "--keras", "2"],
     "--keras 2 is tf.keras of TensorFlow: add tensorflow to --frameworks (got pytorch)"),
    (["--frameworks", "tensorflow", "--keras", "2.15"], "--keras: '2.15'; it takes 3 or 2"),
])
def test_setup_refuses_in_one_line(tmp_path, options, message):
    result = setup_check(tmp_path, *options)
    assert result.returncode == 2
    assert result.stderr == f"setup.sh: error: {message}\n"


def test_a_venv_without_tensorflow_forgets_keras_2(tmp_path):
    """A venv set up for Keras 2 and then for PyTorch alone is not refused:
    the choice is TensorFlow's and goes with it."""
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / "horovod-keras").write_text("2\n")
    assert setup_check(tmp_path, "--frameworks", "pytorch").returncode == 0


def test_build_image_takes_keras_2_for_the_cpu_image_alone(capsys):
    with pytest.raises(SystemExit) as refused:
        image_build.main(["--device", "gpu", "--cuda", "13", "--keras", "2"])
    assert refused.value.code == 2
    assert "--keras 2 is for the CPU image (--device cpu)" in capsys.readouterr().err


def test_keras_2_sets_the_variable_in_every_process_of_the_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = str(venv / "bin" / "python")
    seen = "import os; print(os.environ.get('TF_USE_LEGACY_KERAS'))"

    def variable(**env) -> str:
        return subprocess.run([python, "-c", seen], env={"PATH": "/usr/bin:/bin", **env},
                              capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    hook = keras_choice.choose(python, "2")
    assert hook.parent == venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" \
        / "site-packages"
    assert variable() == "1"
    assert variable(TF_USE_LEGACY_KERAS="0") == "0"  # one run on Keras 3
    keras_choice.choose(python, "3")
    assert not hook.exists() and variable() == "None"

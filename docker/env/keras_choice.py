"""Which Keras is `tf.keras` in an environment: 3, TensorFlow's own (the
default), or 2, the tf-keras that setup.sh installs beside it for Keras 2
scripts.

Keras 2 is a line in the environment's site-packages
(horovod-train-keras-2.pth) that sets TF_USE_LEGACY_KERAS=1, unless it is
set already, in every Python process the environment starts: the user's
shell, each rank horovodrun or srun starts on every host, the image's. No
launcher has to hand the variable on, and `TF_USE_LEGACY_KERAS=0` still
chooses Keras 3 for one run.

    keras_choice.py --python VENV/bin/python --keras 2|3
"""

import argparse
import subprocess
import sys
from pathlib import Path

HOOK_NAME = "horovod-train-keras-2.pth"
# A .pth line that starts with "import" is run at interpreter start.
HOOK = 'import os; os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")\n'


def site_packages(python: str) -> Path:
    """The environment's purelib folder, as its own interpreter names it."""
    return Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip())


def choose(python: str, keras: str) -> Path:
    """Writes the hook for Keras 2, removes it for Keras 3; returns its path."""
    hook = site_packages(python) / HOOK_NAME
    if keras == "2":
        hook.write_text(HOOK)
    else:
        hook.unlink(missing_ok=True)
    return hook


def main() -> int:
    parser = argparse.ArgumentParser(prog="keras_choice.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="the environment's interpreter")
    parser.add_argument("--keras", required=True, choices=["2", "3"])
    args = parser.parse_args()
    try:
        choose(args.python, args.keras)
    except (OSError, subprocess.SubprocessError) as error:
        print(f"keras_choice.py: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

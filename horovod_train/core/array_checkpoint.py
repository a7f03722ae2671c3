"""Checkpoints as one .npz file of named arrays plus a JSON header, for the
TensorFlow and MXNet trainers: written atomically like the PyTorch ones,
read without pickle, and checked against the model before anything is
loaded."""

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from horovod_train.core.atomic import atomic_output
from horovod_train.core.errors import UserError

FORMAT = "horovod-train/array-checkpoint/1"
CHECKPOINT_NAME = "checkpoint.npz"


def checkpoint_path(directory: str | os.PathLike) -> Path:
    return Path(directory) / CHECKPOINT_NAME


def save(directory: str | os.PathLike, framework: str, model_name: str, epochs_done: int,
         arrays: dict[str, np.ndarray], extra: dict) -> Path:
    """Replace the directory's checkpoint. Arrays are stored by position; their
    names and shapes go in the header so a mismatch can be named."""
    names = list(arrays)
    header = {
        "format": FORMAT, "framework": framework, "model_name": model_name,
        "epochs_done": epochs_done, "names": names,
        "shapes": [list(np.shape(arrays[n])) for n in names], "extra": extra,
    }
    path = checkpoint_path(directory)
    # Zipped in memory first: a zip writer whose file fails (a full disk)
    # leaves its own error behind when collected, after ours.
    payload = io.BytesIO()
    np.savez(payload, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
             **{f"a{i}": np.asarray(arrays[n]) for i, n in enumerate(names)})
    with atomic_output(path) as f:
        f.write(payload.getbuffer())
    return path


def load(path: str | os.PathLike, framework: str, model_name: str,
         expected_shapes: dict[str, tuple | None]) -> tuple[int, dict[str, np.ndarray]]:
    """The epochs done and the arrays by name, after checking that the file is
    ours, of this framework and model, and that every array fits."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(data["header"].tobytes())
            arrays = {n: data[f"a{i}"] for i, n in enumerate(header["names"])}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path}: not a readable checkpoint ({text})") from None
    if header.get("format") != FORMAT:
        raise UserError(f"{path}: not a checkpoint of this trainer (format {FORMAT} expected)")
    if (header["framework"], header["model_name"]) != (framework, model_name):
        raise UserError(f"{path} holds {header['framework']} model '{header['model_name']}', "
                        f"this run trains {framework} model '{model_name}'")
    check_shapes(path, {n: a.shape for n, a in arrays.items()}, expected_shapes)
    return int(header["epochs_done"]), arrays


def check_shapes(path, saved: dict[str, tuple], expected: dict[str, tuple | None]) -> None:
    """Name every array that is missing, unexpected or of another shape (an
    expected shape of None takes any)."""
    problems = [f"missing {n}" for n in expected if n not in saved]
    problems += [f"unexpected {n}" for n in saved if n not in expected]
    problems += [f"{n} is {tuple(shape)} not {tuple(expected[n])}"
                 for n, shape in saved.items()
                 if expected.get(n) is not None and tuple(shape) != tuple(expected[n])]
    if problems:
        shown = ", ".join(problems[:4])
        if len(problems) > 4:
            shown += f" and {len(problems) - 4} more"
        raise UserError(f"{path} does not fit this model: {shown}")

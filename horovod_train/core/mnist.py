"""MNIST in torchvision's layout, read with numpy alone so every framework
shares one reader.

    <data-dir>/MNIST/raw/train-images-idx3-ubyte[.gz]
    <data-dir>/MNIST/raw/train-labels-idx1-ubyte[.gz]
    <data-dir>/MNIST/raw/t10k-images-idx3-ubyte[.gz]
    <data-dir>/MNIST/raw/t10k-labels-idx1-ubyte[.gz]

Either form is read. What this module writes is what torchvision writes, so
that `torchvision.datasets.MNIST(data_dir, download=False)` reads it too:
a download keeps the checked .gz and extracts the plain file beside it, and
a subset is written plain.

Missing files are downloaded by one process per host (a file lock in the data
directory); the others wait and then read what it wrote. Every file is checked
on read: IDX magic number, dimensions, size, and label count.
"""

import fcntl
import gzip
import hashlib
import os
import struct
import sys
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from horovod_train.core.atomic import atomic_write_bytes
from horovod_train.core.errors import ArgumentParser, UserError, run_main

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10
# Pixel statistics of the MNIST training set, as in every MNIST example.
MEAN, STD = 0.1307, 0.3081


def normalise(pixels):
    """Pixels of 0 to 255 as float32 (a numpy array or a torch tensor) to
    the network's input: every pipeline of every framework calls this one,
    so all feed their networks the same numbers."""
    return (pixels / 255.0 - MEAN) / STD

SPLIT_PREFIX = {"train": "train", "test": "t10k"}
# Published checksums of the gzip files (the ones torchvision checks too).
GZ_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
DEFAULT_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)
DOWNLOAD_TIMEOUT_S = 30


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # (N, 28, 28) uint8
    labels: np.ndarray  # (N,) uint8

    def __len__(self) -> int:
        return len(self.labels)


def raw_dir(data_dir: str | os.PathLike) -> Path:
    return Path(data_dir) / "MNIST" / "raw"


def file_stems(split: str) -> tuple[str, str]:
    prefix = SPLIT_PREFIX[split]
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


def find_file(raw: Path, stem: str) -> Path | None:
    """The plain file if present (torchvision extracts), else the gzip."""
    for name in (stem, stem + ".gz"):
        if (raw / name).is_file():
            return raw / name
    return None


def read_idx(path: Path, magic: int, what: str) -> np.ndarray:
    """Read one IDX file of unsigned bytes; any damage is a UserError."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as err:
        # gzip.BadGzipFile is an OSError; a cut-off gzip stream is an EOFError.
        raise UserError(f"{path}: cannot read MNIST {what}: {err}") from None
    if len(data) < 4:
        raise UserError(f"{path}: truncated MNIST {what} file ({len(data)} bytes)")
    found = struct.unpack(">I", data[:4])[0]
    if found != magic:
        raise UserError(
            f"{path}: bad magic number {found} (expected {magic} for MNIST {what})"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise UserError(f"{path}: truncated MNIST {what} header")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    expected = int(np.prod(dims))
    body = len(data) - header
    if body != expected:
        state = "truncated" if body < expected else "has trailing bytes"
        raise UserError(
            f"{path}: {state}: header declares {'x'.join(map(str, dims))} = {expected} bytes "
            f"of {what}, file holds {body}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write uint8 images (N, 28, 28) or labels (N,) as IDX, gzipped if the
    name ends in .gz; atomically, so a reader never sees half a file."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    magic = {3: IMAGE_MAGIC, 1: LABEL_MAGIC}[array.ndim]
    payload = struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.tobytes()
    if path.suffix == ".gz":
        payload = gzip.compress(payload, mtime=0)
    atomic_write_bytes(path, payload)


def load_split(data_dir: str | os.PathLike, split: str, download: bool = True) -> Split:
    """Images and labels of one split, downloaded first if missing and allowed."""
    ensure_available(data_dir, [split], download=download)
    return read_pair(raw_dir(data_dir), split)


def load_train_test(data_dir: str | os.PathLike, download: bool = True) -> tuple[Split, Split]:
    """Both splits; missing files of either are fetched (or reported) together."""
    ensure_available(data_dir, ["train", "test"], download=download)
    return read_pair(raw_dir(data_dir), "train"), read_pair(raw_dir(data_dir), "test")


def read_pair(directory: Path, split: str) -> Split:
    """Read and cross-check the images and labels of one split in a directory."""
    image_stem, label_stem = file_stems(split)
    image_path, label_path = find_file(directory, image_stem), find_file(directory, label_stem)
    if image_path is None or label_path is None:
        raise UserError(f"{directory} does not hold {image_stem}[.gz] and {label_stem}[.gz]")
    images = read_idx(image_path, IMAGE_MAGIC, "images")
    labels = read_idx(label_path, LABEL_MAGIC, "labels")
    if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE:
        raise UserError(f"{image_path}: images are {images.shape[1:]}, expected {IMAGE_SHAPE}")
    if len(images) != len(labels):
        raise UserError(
            f"{image_path} holds {len(images)} images but {label_path} holds "
            f"{len(labels)} labels"
        )
    if len(labels) and labels.max() >= NUM_CLASSES:
        raise UserError(f"{label_path}: label {labels.max()} is not a digit 0-9")
    return Split(images, labels)


def missing_files(data_dir: str | os.PathLike, splits: list[str]) -> list[str]:
    raw = raw_dir(data_dir)
    return [
        stem for split in splits for stem in file_stems(split) if find_file(raw, stem) is None
    ]


def ensure_available(
    data_dir: str | os.PathLike, splits: list[str], download: bool = True
) -> None:
    """Make sure the splits' files exist; download the missing ones under a
    lock so that only one process per host (per data directory) fetches."""
    if not missing_files(data_dir, splits):
        return
    raw = raw_dir(data_dir)
    if not download:
        raise UserError(_missing_message(raw, missing_files(data_dir, splits), "downloads are off"))
    try:
        raw.mkdir(parents=True, exist_ok=True)
        lock = open(raw / ".download.lock", "a")  # noqa: SIM115 - held for the with-block below
    except OSError as err:
        raise UserError(f"cannot create the MNIST directory {raw}: {err.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Another process may have fetched the files while this one waited.
        for stem in missing_files(data_dir, splits):
            _download(raw, stem + ".gz", missing_files(data_dir, splits))


def mirrors() -> list[str]:
    """Download locations; HVT_MNIST_MIRRORS (space-separated URLs) overrides."""
    custom = os.environ.get("HVT_MNIST_MIRRORS", "").split()
    return custom or list(DEFAULT_MIRRORS)


def _download(raw: Path, name: str, missing: list[str]) -> None:
    failures = []
    for mirror in mirrors():
        url = mirror.rstrip("/") + "/" + name
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
                payload = response.read()
        except urllib.error.HTTPError as err:
            failures.append(f"{url}: HTTP {err.code} {err.reason}")
            continue
        except (urllib.error.URLError, OSError) as err:
            failures.append(f"{url}: {getattr(err, 'reason', err)}")
            continue
        digest = hashlib.md5(payload).hexdigest()
        if digest != GZ_MD5[name]:
            failures.append(f"{url}: checksum mismatch (md5 {digest}, expected {GZ_MD5[name]})")
            continue
        atomic_write_bytes(raw / name, payload)
        atomic_write_bytes(raw / name.removesuffix(".gz"), gzip.decompress(payload))
        return
    raise UserError(_missing_message(raw, missing, "; ".join(failures)))


def _missing_message(raw: Path, missing: list[str], why: str) -> str:
    return (
        f"MNIST files missing in {raw}: {', '.join(missing)} ({why}). "
        "Put the files there (plain or .gz) or point --data-dir at a directory "
        "holding MNIST/raw/"
    )


def write_subset(source_dir: Path, data_dir: Path, n_train: int, n_test: int) -> None:
    """Write a train/test pair in the torchvision layout, as plain files like
    torchvision's own, from a copy of the 10,000-digit MNIST test split (for
    offline machines): the first n_train digits become the training set and
    the last n_test the test set."""
    source = read_pair(source_dir, "test")
    if n_train < 1 or n_test < 1 or n_train + n_test > len(source):
        raise UserError(
            f"{source_dir} holds {len(source)} digits: cannot take {n_train} to train "
            f"and {n_test} to test"
        )
    raw = raw_dir(data_dir)
    raw.mkdir(parents=True, exist_ok=True)
    parts = {"train": slice(0, n_train), "test": slice(len(source) - n_test, len(source))}
    for split, rows in parts.items():
        image_stem, label_stem = file_stems(split)
        write_idx(raw / image_stem, source.images[rows])
        write_idx(raw / label_stem, source.labels[rows])


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m horovod_train mnist",
        description="Fetch, check or prepare MNIST in the torchvision layout.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("download", help="download missing files into DATA_DIR")
    check = commands.add_parser("check", help="read and verify both splits in DATA_DIR")
    for sub in (fetch, check):
        sub.add_argument("--data-dir", type=Path, required=True)
    subset = commands.add_parser(
        "subset",
        help="write a train/test pair from a copy of the 10,000 test digits (offline machines)",
    )
    subset.add_argument("--source", type=Path, required=True,
                        help="directory holding t10k-images-idx3-ubyte[.gz] and "
                             "t10k-labels-idx1-ubyte[.gz]")
    subset.add_argument("--data-dir", type=Path, required=True)
    subset.add_argument("--train", type=int, default=8000, help="first N digits to train on")
    subset.add_argument("--test", type=int, default=2000, help="last N digits to test on")
    args = parser.parse_args(argv)

    if args.command == "download":
        ensure_available(args.data_dir, ["train", "test"], download=True)
    elif args.command == "subset":
        write_subset(args.source, args.data_dir, args.train, args.test)
    for split in ("train", "test"):
        data = load_split(args.data_dir, split, download=False)
        print(f"{split}: {len(data)} digits in {raw_dir(args.data_dir)}")
    return 0


def cli() -> None:
    """The command's entry (python -m horovod_train mnist)."""
    run_main(lambda: main(sys.argv[1:]))

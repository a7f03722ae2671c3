"""The MNIST reader: real files read, damaged files named, downloads done by
one process and checked."""

import functools
import gzip
import http.server
import shutil
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

from horovod_train.core import mnist
from horovod_train.core.errors import UserError


def test_reads_the_real_test_digits(t10k_dir):
    split = mnist.read_pair(t10k_dir, "test")
    assert split.images.shape == (10000, 28, 28)
    assert split.images.dtype == np.uint8
    assert sorted(set(split.labels.tolist())) == list(range(10))
    # The first test digit of MNIST is a 7, the second a 2.
    assert split.labels[:2].tolist() == [7, 2]


def test_subset_takes_first_for_training_and_last_for_testing(t10k_dir, mnist_dir):
    source = mnist.read_pair(t10k_dir, "test")
    train = mnist.load_split(mnist_dir, "train", download=False)
    test = mnist.load_split(mnist_dir, "test", download=False)
    assert len(train) == 8000 and len(test) == 2000
    assert np.array_equal(train.images, source.images[:8000])
    assert np.array_equal(test.labels, source.labels[-2000:])


def test_torchvision_reads_what_subset_writes(t10k_dir, mnist_dir):
    """Horovod's own example and torchvision users point torchvision's MNIST
    at the same directory, without downloading again."""
    from torchvision import datasets
    train = datasets.MNIST(str(mnist_dir), train=True, download=False)
    test = datasets.MNIST(str(mnist_dir), train=False, download=False)
    source = mnist.read_pair(t10k_dir, "test")
    assert len(train) == 8000 and len(test) == 2000
    assert np.array_equal(train.data.numpy(), source.images[:8000])
    assert np.array_equal(test.targets.numpy(), source.labels[-2000:])


def test_plain_and_gzipped_files_read_the_same(tmp_path, mnist_dir):
    raw = mnist.raw_dir(mnist_dir)
    gzipped = mnist.raw_dir(tmp_path)
    gzipped.mkdir(parents=True)
    for plain in raw.glob("*-ubyte"):
        (gzipped / (plain.name + ".gz")).write_bytes(gzip.compress(plain.read_bytes()))
    a = mnist.load_split(mnist_dir, "test", download=False)
    b = mnist.load_split(tmp_path, "test", download=False)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)


@pytest.fixture
def small_dir(tmp_path):
    """A valid 10-digit test split, to be damaged by each test."""
    raw = mnist.raw_dir(tmp_path)
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    mnist.write_idx(raw / "t10k-images-idx3-ubyte", rng.integers(0, 256, (10, 28, 28)))
    mnist.write_idx(raw / "t10k-labels-idx1-ubyte", rng.integers(0, 10, 10))
    return tmp_path


def test_valid_small_split_loads(small_dir):
    assert len(mnist.load_split(small_dir, "test", download=False)) == 10


def test_bad_magic_number_is_named(small_dir):
    path = mnist.raw_dir(small_dir) / "t10k-images-idx3-ubyte"
    data = bytearray(path.read_bytes())
    data[:4] = struct.pack(">I", 1234)
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"bad magic number 1234 \(expected 2051"):
        mnist.load_split(small_dir, "test", download=False)


def test_labels_swapped_for_images_is_a_bad_magic_number(small_dir):
    raw = mnist.raw_dir(small_dir)
    shutil.copy(raw / "t10k-labels-idx1-ubyte", raw / "t10k-images-idx3-ubyte")
    with pytest.raises(UserError, match="bad magic number 2049"):
        mnist.load_split(small_dir, "test", download=False)


def test_truncated_file_is_named(small_dir):
    path = mnist.raw_dir(small_dir) / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(UserError, match=r"truncated: header declares 10x28x28 = 7840 bytes"):
        mnist.load_split(small_dir, "test", download=False)


def test_truncated_gzip_is_named(tmp_path, t10k_dir):
    raw = mnist.raw_dir(tmp_path)
    shutil.copytree(t10k_dir, raw)
    path = raw / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(UserError, match="t10k-images-idx3-ubyte.gz: cannot read MNIST images"):
        mnist.load_split(tmp_path, "test", download=False)


def test_label_count_must_match_image_count(small_dir):
    raw = mnist.raw_dir(small_dir)
    mnist.write_idx(raw / "t10k-labels-idx1-ubyte", np.zeros(9, dtype=np.uint8))
    with pytest.raises(UserError, match="holds 10 images but .* holds 9 labels"):
        mnist.load_split(small_dir, "test", download=False)


def test_missing_files_without_download_say_what_and_where(tmp_path):
    with pytest.raises(UserError) as err:
        mnist.load_split(tmp_path, "train", download=False)
    message = str(err.value)
    assert "train-images-idx3-ubyte, train-labels-idx1-ubyte" in message
    assert str(mnist.raw_dir(tmp_path)) in message and "--data-dir" in message
    assert "\n" not in message


@pytest.fixture
def loopback_mirror(t10k_dir, tmp_path, monkeypatch):
    """An HTTP server on 127.0.0.1 serving a copy of the t10k files, plus a
    train-images file with the wrong content, as HVT_MNIST_MIRRORS."""
    served = tmp_path / "served"
    served.mkdir()
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        shutil.copy(t10k_dir / name, served / name)
    (served / "train-images-idx3-ubyte.gz").write_bytes(b"not mnist")
    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.served = served
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HVT_MNIST_MIRRORS", f"http://127.0.0.1:{server.server_port}/")
    yield server
    server.shutdown()


def test_download_fetches_missing_files_and_checks_them(loopback_mirror, tmp_path):
    """As torchvision's download does: the checked .gz is kept and the
    plain file, which torchvision reads, is extracted beside it."""
    data_dir = tmp_path / "data"
    split = mnist.load_split(data_dir, "test", download=True)
    assert len(split) == 10000
    raw = mnist.raw_dir(data_dir)
    assert {p.name for p in raw.glob("t10k-*")} == {
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}
    for gz in raw.glob("*.gz"):
        assert (raw / gz.stem).read_bytes() == gzip.decompress(gz.read_bytes())


def test_download_rejects_a_file_with_the_wrong_checksum(loopback_mirror, tmp_path):
    with pytest.raises(UserError, match="checksum mismatch"):
        mnist.load_split(tmp_path / "data", "train", download=True)
    assert not list(mnist.raw_dir(tmp_path / "data").glob("train-*"))


def test_download_names_the_url_that_failed(loopback_mirror, tmp_path):
    (loopback_mirror.served / "train-images-idx3-ubyte.gz").unlink()
    with pytest.raises(UserError, match=r"train-images-idx3-ubyte.gz: HTTP 404"):
        mnist.load_split(tmp_path / "data", "train", download=True)


def test_concurrent_downloads_fetch_each_file_once(loopback_mirror, tmp_path):
    """Several processes of one host share the data directory: the lock lets
    one download while the others wait and then read."""
    requests = []
    original = loopback_mirror.RequestHandlerClass
    loopback_mirror.RequestHandlerClass = lambda *a, **k: (requests.append(1), original(*a, **k))
    data_dir = tmp_path / "data"
    code = (f"from horovod_train.core import mnist; "
            f"print(len(mnist.load_split({str(data_dir)!r}, 'test')))")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert outputs == ["10000"] * 4
    assert len(requests) == 2  # images and labels, once each


def test_cli_subset_then_check(t10k_dir, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "horovod_train.mnist", "subset", "--source", str(t10k_dir),
         "--data-dir", str(tmp_path), "--train", "100", "--test", "50"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "train: 100 digits" in result.stdout and "test: 50 digits" in result.stdout


def test_cli_reports_errors_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "horovod_train.mnist", "check", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "error: MNIST files missing" in result.stderr
    assert "Traceback" not in result.stderr

"""refresh_lock.py's rules: the lock read per Python, written back with a
marker where Pythons differ, and what moved said a line per package. The
resolution itself is uv's (the command is run by hand, against the index)."""

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "docker" / "env"))
import lock  # noqa: E402
import refresh_lock  # noqa: E402


def test_the_lock_reads_back_as_it_is_written():
    text = lock.LOCK.read_text()
    pins = refresh_lock.current_pins(text)
    assert pins["numpy"]["3.11"] != pins["numpy"]["3.13"]
    assert set(pins["torch"]) == set(lock.PYTHONS)
    written = [line for line in text.splitlines() if lock.pin_name(line)]
    rebuilt = refresh_lock.pin_lines(pins)
    assert sorted(rebuilt) == sorted(written)


@pytest.mark.parametrize("pythons, marker", [
    (["3.12", "3.13"], 'python_version >= "3.12"'),
    (["3.11"], 'python_version < "3.12"'),
    (["3.11", "3.12"], 'python_version < "3.13"'),
    (["3.13"], 'python_version >= "3.13"'),
])
def test_a_marker_names_the_pythons_of_a_version(pythons, marker):
    assert refresh_lock.marker(pythons) == marker
    assert [p for p in lock.PYTHONS if refresh_lock.marker_holds(marker, p)] == pythons


def test_a_package_on_some_pythons_at_one_version_needs_no_marker():
    pins = {"mxnet": {"3.11": "1.9.1"},
            "numpy": {"3.11": "1.26.4", "3.12": "2.5.5", "3.13": "2.5.5"}}
    assert refresh_lock.pin_lines(pins) == [
        "mxnet==1.9.1", 'numpy==1.26.4; python_version < "3.12"',
        'numpy==2.5.5; python_version >= "3.12"']


def test_what_moved_is_a_line_per_package():
    both = {p: "2.15.0" for p in lock.PYTHONS}
    old = {"torch": {p: "2.14.1" for p in lock.PYTHONS},
           "tensorflow-estimator": {"3.11": "2.15.0"},
           "numpy": {"3.11": "1.23.5", "3.12": "2.4.6", "3.13": "2.4.6"},
           "six": {p: "1.17.0" for p in lock.PYTHONS}}
    new = {"torch": both, "keras": {p: "3.15.1" for p in lock.PYTHONS},
           "numpy": {"3.11": "1.26.4", "3.12": "2.4.6", "3.13": "2.4.6"},
           "six": {p: "1.17.0" for p in lock.PYTHONS}}
    assert refresh_lock.moves(old, new) == [
        "+ keras 3.15.1",
        "  numpy 1.23.5 (Python 3.11), 2.4.6 (Python 3.12), 2.4.6 (Python 3.13) -> "
        "1.26.4 (Python 3.11), 2.4.6 (Python 3.12), 2.4.6 (Python 3.13)",
        "- tensorflow-estimator 2.15.0",
        "  torch 2.14.1 -> 2.15.0",
    ]


def test_a_marker_it_cannot_read_is_said():
    with pytest.raises(refresh_lock.RefreshFailed, match="does not read: sys_platform"):
        refresh_lock.current_pins('pywin32==311; sys_platform == "win32"\n')


def test_every_framework_group_has_its_pythons():
    sections = {group for _, groups, _ in refresh_lock.SECTIONS for group in groups}
    assert set(lock.FRAMEWORK_PYTHONS) <= sections
    for group in sections:
        assert (refresh_lock.REQUIREMENTS / f"{group}.txt").is_file(), group


def test_tf_keras_is_pinned_at_the_release_of_tensorflow_on_every_python_that_has_it():
    """setup.sh installs the lock's tf-keras without its dependencies: its
    release must be TensorFlow's, or `import tf_keras` meets another TF."""
    pins = refresh_lock.current_pins(lock.LOCK.read_text())
    assert pins[refresh_lock.KERAS_2] == pins["tensorflow-cpu"]
    # TensorFlow's GPU wheel (the CUDA 12 variant's, by hand) is the same release.
    assert refresh_lock.current_pins(lock.lock_text(12))["tensorflow"] == pins["tensorflow-cpu"]

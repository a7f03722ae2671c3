"""The image build keeps one generation of its images: a rebuild removes
the images (and their step images) that it supersedes, and nothing that is
tagged or shared with the new build. Real podman, tiny images on the local
Debian base that scripts/build_image.sh makes."""

import shutil
import subprocess

import pytest
from conftest import wait_for_image_build

from horovod_train.image import build as build_image


@pytest.fixture
def podman_base() -> str:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/build_image.sh installs it)")
    # The CPU image's build makes the base in its first minutes.
    wait_for_image_build("cpu", ready=lambda: build_image.image_id("podman",
                                                                 build_image.DEBIAN_BASE))
    if not build_image.image_id("podman", build_image.DEBIAN_BASE):
        pytest.skip(f"no {build_image.DEBIAN_BASE}: scripts/build_image.sh makes it")
    return build_image.DEBIAN_BASE


def build_tiny(tmp_path, base: str, tag: str, last_line: str) -> str:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base}\nRUN echo shared > /shared\nRUN echo {last_line} > /own\n"
        f"RUN echo {last_line} > /own2\n")
    built = subprocess.run(["podman", "build", "-q", "--layers", "--isolation", "chroot", "-t",
                            tag, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]  # podman's reason, when it fails
    return build_image.image_id("podman", tag)


def remove_test_images(tag: str, *images: str | None) -> None:
    subprocess.run(["podman", "untag", tag], capture_output=True)
    for image in images:
        if image:
            build_image.remove_superseded("podman", image)


def parent(image: str) -> str:
    return subprocess.run(["podman", "image", "inspect", "--format", "{{.Parent}}", image],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_superseded_build_goes_with_its_own_step_images_only(tmp_path, podman_base):
    tag = "localhost/horovod-train-test:superseded"
    old = new = None
    try:
        old = build_tiny(tmp_path, podman_base, tag, "one")
        old_step = parent(old)
        shared_step = parent(old_step)
        new = build_tiny(tmp_path, podman_base, tag, "two")
        assert new != old and parent(parent(new)) == shared_step

        build_image.remove_superseded("podman", old)

        assert build_image.image_id("podman", old) is None
        assert build_image.image_id("podman", old_step) is None
        assert build_image.image_id("podman", shared_step) == shared_step
        assert build_image.image_id("podman", tag) == new
    finally:
        remove_test_images(tag, old, new)


def test_a_tagged_image_is_never_removed(tmp_path, podman_base):
    tag = "localhost/horovod-train-test:tagged"
    current = None
    try:
        current = build_tiny(tmp_path, podman_base, tag, "kept")
        build_image.remove_superseded("podman", current)
        assert build_image.image_id("podman", tag) == current
    finally:
        remove_test_images(tag, current)


def test_a_docker_client_without_a_daemon_is_not_taken_for_an_engine(tmp_path, monkeypatch):
    """CI machines have a docker client and no daemon: the build must use
    podman there, not fail on docker's socket."""
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True,
                                        timeout=30).returncode == 0:
        pytest.skip("needs a docker client with no daemon behind it")
    (tmp_path / "docker").symlink_to(docker)
    monkeypatch.setenv("PATH", str(tmp_path))  # the real client, and no podman
    assert build_image.pick_engine() == "podman"

"""The training image's recipe, read without building it: the Dockerfile's
defaults and a build context that is docker/ alone (`docker build
docker/`). Its lint is test_image_run.py's; the built images, run as
hosts, are test_image_cluster.py's."""


import re

from conftest import (
    REPO,
)

CONTEXT = REPO / "docker"

DOCKERFILE = CONTEXT / "Dockerfile"


def test_defaults_build_the_gpu_image_on_debian():
    text = DOCKERFILE.read_text()
    defaults = dict(re.findall(r"^ARG (\w+)=(\S+)", text, flags=re.M))
    for image in re.findall(r"^FROM (\S+)", text, flags=re.M):
        for name in re.findall(r"\$\{(\w+)\}", image):
            assert defaults.get(name), f"FROM {image}: no default for {name}"
    assert defaults["BASE_IMAGE"] == "debian:bookworm"
    assert defaults["DEVICE"] == "gpu"
    assert defaults["GCC_VERSION"] == "12"
    assert defaults["CUDA_ARCHS"] == "torch"


def test_everything_the_dockerfile_copies_is_in_docker_dir():
    """`docker build docker/` sends docker/ alone: every COPY source (but
    those from a stage) must lie inside it."""
    sources = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources += line.split()[1:-1]
    assert sources
    for source in sources:
        assert (CONTEXT / source).exists(), source
        assert (CONTEXT / source).resolve().is_relative_to(CONTEXT)

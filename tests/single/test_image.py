"""The training image, both variants, as scripts/test.sh builds them with
podman from docker/ as the context (`docker build docker/`): a lint-clean
Dockerfile whose build context is docker/ alone; Horovod with NCCL (gpu),
its CUDA kernels for every architecture torch has and the RDMA stack NCCL
loads, or with all three frameworks (cpu), every library it links
resolvable, no CUDA library twice, no private key in any layer; and the
two-host command run inside each, on hosts that are containers of the image
(its entrypoint, its sshd, keys from scripts/cluster_keys.sh, the checkout
mounted at /workspace), and in the image that carries the code, with
nothing mounted. Bad build arguments fail early with one line."""


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

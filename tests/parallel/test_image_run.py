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


import subprocess

import pytest
from conftest import (
    BIN,
    REPO,
)

CONTEXT = REPO / "docker"

DOCKERFILE = CONTEXT / "Dockerfile"


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, CONTEXT / "app.Dockerfile"],
                         ids=lambda path: path.name)
def test_dockerfile_passes_hadolint(dockerfile):
    result = subprocess.run([str(BIN / "hadolint"), str(dockerfile)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""

"""The Dockerfiles pass hadolint (the environment's and the code image's).
The recipe's rules are test_image.py's; the built images,
test_image_cluster.py's."""


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

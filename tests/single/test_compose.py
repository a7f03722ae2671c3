"""docker/compose.yaml: two nodes named a and b from the image, so
`horovodrun -np 4 -H a:2,b:2` works as written; keys mounted read-only, never
baked in; GPUs added by compose.gpu.yaml, InfiniBand/RoCE by
compose.rdma.yaml."""

import re

import pytest
import yaml
from conftest import REPO

from horovod_train.launch.hosts import IMAGE_SSH_PORT

COMPOSE_FILE = REPO / "docker" / "compose.yaml"
RDMA_FILE = REPO / "docker" / "compose.rdma.yaml"
COMPOSE = yaml.safe_load(COMPOSE_FILE.read_text())
GPU = yaml.safe_load((REPO / "docker" / "compose.gpu.yaml").read_text())
RDMA = yaml.safe_load(RDMA_FILE.read_text())


def test_services_are_nodes_a_and_b_with_matching_hostnames():
    services = COMPOSE["services"]
    assert set(services) == {"a", "b"}
    for name, service in services.items():
        assert service["hostname"] == name
        assert service["environment"]["HVT_CLUSTER_HOSTS"].split() == ["a", "b"]
        assert service["environment"]["HVT_SSH_PORT"] == str(IMAGE_SSH_PORT)
        assert service["networks"] == ["cluster"]


def test_the_images_sshd_port_is_one_number_everywhere_in_the_image():
    """The image's port, defined once for the tools (hosts.IMAGE_SSH_PORT),
    is the one its files start sshd on and announce."""
    docker = REPO / "docker"
    assert re.findall(r"^Port (\d+)$", (docker / "sshd_config").read_text(), re.M) == [
        str(IMAGE_SSH_PORT)]
    assert re.findall(r"^port=\$\{HVT_SSH_PORT:-(\d+)\}$",
                      (docker / "entrypoint.sh").read_text(), re.M) == [str(IMAGE_SSH_PORT)]
    assert re.findall(r"^EXPOSE (\d+)$", (docker / "Dockerfile").read_text(), re.M) == [
        str(IMAGE_SSH_PORT)]


def test_keys_are_mounted_read_only_and_shm_is_large():
    for service in COMPOSE["services"].values():
        keys = [v for v in service["volumes"] if ":/etc/horovod/keys" in v]
        assert len(keys) == 1 and keys[0].endswith(":ro")
        assert service["shm_size"].endswith("gb") and int(service["shm_size"][:-2]) >= 1


def gpus_given(environment: dict) -> dict[str, list[str]]:
    """Each node's GPUs as compose.gpu.yaml gives them under `environment`
    (Compose's ${VAR:-default}; the NVIDIA runtime joins the list with commas
    and splits it again)."""
    given = {}
    for name, service in GPU["services"].items():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert "count" not in device  # count: all would give every node every GPU
        ids = ",".join(re.sub(r"\$\{(\w+):-([^}]*)\}",
                              lambda m: environment.get(m[1]) or m[2], item)
                       for item in device["device_ids"])
        given[name] = ids.split(",")
    return given


@pytest.mark.parametrize("environment", [
    {},  # the defaults: one GPU each
    {"HVT_GPUS_A": "0,1,2,3", "HVT_GPUS_B": "4,5,6,7"},
    {"HVT_GPUS_A": "GPU-3b1f0c2e", "HVT_GPUS_B": "GPU-9d5e77aa"},
])
def test_gpu_override_gives_each_node_its_own_gpus(environment):
    given = gpus_given(environment)
    assert set(given) == {"a", "b"}
    assert all(given.values())
    assert not set(given["a"]) & set(given["b"]), given


def test_gpu_override_says_how_to_choose_the_gpus():
    header = (REPO / "docker" / "compose.gpu.yaml").read_text().split("\nservices:")[0]
    assert "HVT_GPUS_A=0,1 HVT_GPUS_B=2,3" in header and "nvidia-smi -L" in header
    assert gpus_given({"HVT_GPUS_A": "0,1", "HVT_GPUS_B": "2,3"}) == {"a": ["0", "1"],
                                                                      "b": ["2", "3"]}


def test_image_builds_from_docker_dir_and_code_is_the_mounted_checkout():
    for service in COMPOSE["services"].values():
        assert service["build"] == "."  # compose.yaml's folder: `docker build docker/`
        assert "..:/workspace" in service["volumes"]


def test_code_image_instructions_name_the_mount_to_drop():
    """The header tells how to run docker/app.Dockerfile's image: the mount
    it names is the one that would hide the image's code."""
    header = COMPOSE_FILE.read_text().split("\nx-node:")[0]
    assert "docker build -f docker/app.Dockerfile -t horovod-train-app ." in header
    assert "HVT_IMAGE=horovod-train-app" in header and "--no-build" in header
    assert "`..:/workspace`" in header
    assert COMPOSE["x-node"]["image"] == "${HVT_IMAGE:-horovod-train}"
    assert (REPO / "docker" / "app.Dockerfile").is_file()


def test_rdma_override_gives_both_nodes_the_devices_ipc_lock_and_no_memlock_limit():
    assert set(RDMA["services"]) == set(COMPOSE["services"]) == {"a", "b"}
    for service in RDMA["services"].values():
        assert service["devices"] == ["/dev/infiniband:/dev/infiniband"]
        assert service["cap_add"] == ["IPC_LOCK"]
        assert service["ulimits"] == {"memlock": {"soft": -1, "hard": -1}}
        # Only that: the base file keeps the rest, the GPU file the GPUs.
        assert set(service) == {"devices", "cap_add", "ulimits"}


def test_rdma_override_documents_its_command_with_the_other_files():
    command = re.search(r"docker compose (?:[^\n]*\\\n#)*[^\n]*up -d", RDMA_FILE.read_text())
    assert command, "no `docker compose ... up -d` line in compose.rdma.yaml's header"
    files = re.findall(r"-f (\S+)", command.group(0))
    assert files == ["docker/compose.yaml", "docker/compose.gpu.yaml", "docker/compose.rdma.yaml"]
    assert all((REPO / f).is_file() for f in files)

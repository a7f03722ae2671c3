"""docker/compose.yaml: two nodes named a and b from the image, so
`horovodrun -np 4 -H a:2,b:2` works as written; keys mounted read-only, never
baked in; GPUs added by compose.gpu.yaml, InfiniBand/RoCE by
compose.rdma.yaml."""

import re

import yaml
from conftest import REPO

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
        assert service["environment"]["HVT_SSH_PORT"] == "12345"
        assert service["networks"] == ["cluster"]


def test_keys_are_mounted_read_only_and_shm_is_large():
    for service in COMPOSE["services"].values():
        keys = [v for v in service["volumes"] if ":/etc/horovod/keys" in v]
        assert len(keys) == 1 and keys[0].endswith(":ro")
        assert service["shm_size"].endswith("gb") and int(service["shm_size"][:-2]) >= 1


def test_gpu_override_reserves_nvidia_gpus_for_both_nodes():
    for name in ("a", "b"):
        devices = GPU["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]


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

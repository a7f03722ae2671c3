"""docker/compose.yaml: two nodes named a and b from the image, so
`horovodrun -np 4 -H a:2,b:2` works as written; keys mounted read-only, never
baked in; GPUs added by compose.gpu.yaml."""

import yaml
from conftest import REPO

COMPOSE = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
GPU = yaml.safe_load((REPO / "docker" / "compose.gpu.yaml").read_text())


def test_services_are_nodes_a_and_b_with_matching_hostnames():
    services = COMPOSE["services"]
    assert set(services) == {"a", "b"}
    for name, service in services.items():
        assert service["hostname"] == name
        assert service["environment"]["CLUSTER_HOSTS"].split() == ["a", "b"]
        assert service["environment"]["SSH_PORT"] == "12345"
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

"""The project's own environment variables share one prefix, HVT_; Horovod's,
horovodrun's, Open MPI's, NCCL's and Slurm's keep their own names. RENAMED
maps each name the project used before to the one it reads now: where an
old name is set, the program says the new one in one line (errors.run_main
does, for every Python entry point) and reads only the new one.

Standard library only (errors.py imports it)."""

import os

PREFIX = "HVT_"

RENAMED = {
    # The Slurm job's settings (scripts/slurm/horovod.sbatch).
    "HOROVOD_RUNTIME": "HVT_RUNTIME",
    "HOROVOD_IMAGE": "HVT_IMAGE",
    "HOROVOD_MOUNTS": "HVT_MOUNTS",
    "HOROVOD_KEYS": "HVT_KEYS",
    "HOROVOD_SSH_PORT": "HVT_SSH_PORT",
    "HOROVOD_TRAINER": "HVT_TRAINER",
    "HOROVOD_TRAIN_DIR": "HVT_TRAIN_DIR",
    "HOROVOD_DRY_RUN": "HVT_DRY_RUN",
    "RESUME": "HVT_RESUME",
    # The containers' entrypoint, Compose and the MPIJob.
    "CLUSTER_HOSTS": "HVT_CLUSTER_HOSTS",
    "CLUSTER_KEYS_DIR": "HVT_KEYS_DIR",
    "CLUSTER_KEYS": "HVT_KEYS",
    "SSH_PORT": "HVT_SSH_PORT",
    "IMAGE": "HVT_IMAGE",
    "DATA_DIR": "HVT_DATA_DIR",
    # The trainers, the environment recipe, the scripts.
    "HOROVOD_TRAIN_MALLOC": "HVT_MALLOC",
    "HOROVOD_WHEEL_CACHE": "HVT_WHEEL_CACHE",
    "PYTHON": "HVT_PYTHON",
    "ELASTIC_HOSTS_FILE": "HVT_ELASTIC_HOSTS_FILE",
    "MNIST_MIRRORS": "HVT_MNIST_MIRRORS",
    "MNIST_T10K_DIR": "HVT_MNIST_T10K_DIR",
    # The emulated cluster and Slurm.
    "EMULATE_SUBNET": "HVT_EMULATE_SUBNET",
    "EMULATE_STATE_DIR": "HVT_EMULATE_STATE_DIR",
    "SLURM_STATE_DIR": "HVT_SLURM_STATE_DIR",
}

# Set by horovodrun in each rank (over Gloo, over MPI): only rank 0 speaks.
RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")


def old_name_notes(environ=os.environ) -> list[str]:
    """A line for each old name set in `environ`, unless this is a rank
    other than 0 (the launcher's rank 0 says it for all)."""
    if any(environ.get(name, "0") != "0" for name in RANK_VARIABLES):
        return []
    return [f"note: {old} is now {new}; {old} is not read" for old, new in RENAMED.items()
            if old in environ]

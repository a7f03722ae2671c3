"""The front door: every command of the platform, by name.

    python -m horovod_train COMMAND [ARGS...]      (or: horovod-train COMMAND ...)
    python -m horovod_train --help

Each command is a module of the package with a cli(); this runs it as
`python -m MODULE ARGS...` would. The shell commands under scripts/ start
theirs so, through scripts/python.sh. Standard library only until a command
is chosen: the commands that build the image or emulate hosts run on a bare
python3."""

import importlib
import sys

# name: (module, what it does), in the order --help lists them.
COMMANDS = {
    "pytorch-mnist": ("horovod_train.pytorch_mnist",
                      "train MNIST with PyTorch (horovod_train/pytorch_mnist.py)"),
    "tensorflow2-mnist": ("horovod_train.tensorflow2_mnist",
                          "train MNIST with TensorFlow 2 (horovod_train/tensorflow2_mnist.py)"),
    "mxnet-mnist": ("horovod_train.mxnet_mnist",
                    "train MNIST with MXNet (horovod_train/mxnet_mnist.py)"),
    "mnist": ("horovod_train.mnist", "download, subset or check MNIST in a data directory"),
    "launch": ("horovod_train.launch.horovodrun",
               "horovodrun with the hosts checked first (scripts/launch.sh)"),
    "preflight": ("horovod_train.launch.preflight",
                  "check the job's hosts and every pair of them first "
                  "(scripts/preflight.sh)"),
    "launch-cluster": ("horovod_train.launch.containers",
                       "the image on real hosts, horovodrun from the first "
                       "(scripts/launch_cluster.sh)"),
    "discover-hosts": ("horovod_train.launch.host_discovery",
                       "the hosts of a hostfile for Horovod Elastic "
                       "(scripts/discover_hosts.sh)"),
    "build-image": ("horovod_train.image.build", "build the image (scripts/build_image.sh)"),
    "emulate-cluster": ("horovod_train.emulation.cluster",
                        "hosts emulated on this machine, for horovodrun across them "
                        "(scripts/emulate_cluster.sh)"),
    "slurm-submit": ("horovod_train.launch.slurm.submit",
                     "submit training to Slurm with Submitit (scripts/slurm/submit.sh)"),
    "slurm-job": ("horovod_train.launch.slurm.sbatch",
                  "Horovod on a Slurm allocation, the batch step of "
                  "scripts/slurm/horovod.sbatch"),
    "slurm-local-cluster": ("horovod_train.emulation.slurm",
                            "a real Slurm on this machine, over the emulated hosts "
                            "(scripts/slurm/local_cluster.sh)"),
}

PROG = "python -m horovod_train"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} COMMAND [ARGS...]   (COMMAND --help: its options)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        sys.exit(0 if argv else 2)
    name, args = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"{PROG}: no command {name!r} (the commands: {PROG} --help)", file=sys.stderr)
        sys.exit(2)
    try:
        module = importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as err:
        if not COMMANDS[name][0].startswith(str(err.name)):
            raise
        # The emulation is the lab's: a checkout has it, the installed package not.
        print(f"{PROG}: {name} runs from a checkout of the project ({COMMANDS[name][1]}); "
              "this installation has the product alone", file=sys.stderr)
        sys.exit(2)
    sys.argv = [module.__file__, *args]  # as `python -m MODULE ARGS...` sets it
    module.cli()


if __name__ == "__main__":
    main()

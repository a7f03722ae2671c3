"""What every entry point does before its ranks start, in one order
(launch/pipeline.py's steps 3 to 5): the hosts reached as the ranks will be,
the preflight when asked, then the network. scripts/launch.sh
(horovodrun.py), the Slurm job (slurm/sbatch.py) and a trainer's --num-proc
(python_launcher.py) call it, each having read its job and checked its
input, and then start their ranks their own way. It sits above both
pipeline.py and preflight.py, whose steps it orders."""

from horovod_train.launch import network, pipeline, preflight
from horovod_train.launch.job import Job


def prepare(job: Job, env: dict, *, preflight_asked: bool = False, check_hosts: bool = True,
            layers: dict[str, str] | None = None) -> network.Choice | None:
    """The hosts checked (`check_hosts` False where the ranks' sshd is checked
    once it has started: a container's), the preflight when asked, then the
    network the ranks use (pipeline.choose_network, with the `layers`' own
    interface variables): None where every host is this machine."""
    if check_hosts:
        pipeline.check_hosts(job)
    if preflight_asked:
        preflight.run(job)
    return pipeline.choose_network(job, env, layers)

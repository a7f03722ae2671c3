"""A cluster on one machine, for the tests, the demo and trying things out:
hosts a and b as network namespaces with their own sshd, or as containers
of an image (cluster), and a real Slurm over them (slurm). Both need root
and run from a checkout."""

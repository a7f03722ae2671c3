"""Slurm's own part of launching: the job that scripts/slurm/horovod.sbatch
runs (sbatch.py), its settings and commands (plan.py), and the Submitit
submission of scripts/slurm/submit.sh (submit.py). The allocation a job runs
in (launch/allocation.py) is below, shared with the preflight and the
network probe. The job's modules need the standard library alone: it runs
under a bare python3."""

#!/usr/bin/env bash
# Submit Horovod training to Slurm from Python, with Submitit: the job of
# horovod.sbatch plus requeue-and-resume; see --help. Logic in
# horovod_train/launch/slurm/submit.py.
set -euo pipefail
exec "$(dirname "$0")/../python.sh" -m horovod_train slurm-submit "$@"

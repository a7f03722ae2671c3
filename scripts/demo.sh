#!/usr/bin/env bash
# The README's main job: set up (or reuse) the environment, make sure MNIST is
# there, and train it with Horovod on this machine (GPUs if present, else CPU).
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/demo.sh [--np N] [--epochs N] [--controller gloo|mpi] [--data-dir DIR]
                       [--two-hosts] [-- TRAINER OPTIONS...]

  --np N          ranks (default: the GPUs present, else 2)
  --epochs N      epochs (default 3)
  --controller C  gloo (default) or mpi
  --data-dir DIR  MNIST in torchvision layout (default: data); downloaded if missing
  --two-hosts     run the two-host command, -np 4 -H a:2,b:2, across two emulated
                  hosts on this machine (needs root); --np is then 4

Offline machines: set HVT_MNIST_T10K_DIR to a directory holding the MNIST test
split (t10k-*-ubyte.gz); the demo then trains on its first 8,000 digits and
tests on the last 2,000.
USAGE
}

np=""
epochs=3
controller=gloo
data_dir=data
two_hosts=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np) np="${2:?--np needs a value}"; shift 2 ;;
    --epochs) epochs="${2:?--epochs needs a value}"; shift 2 ;;
    --controller) controller="${2:?--controller needs a value}"; shift 2 ;;
    --data-dir) data_dir="${2:?--data-dir needs a value}"; shift 2 ;;
    --two-hosts) two_hosts=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "demo.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$controller" == gloo || "$controller" == mpi ]] || {
  echo "demo.sh: error: --controller takes gloo or mpi, not $controller" >&2; exit 2; }

cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

# Data: what is in --data-dir, else the test digits HVT_MNIST_T10K_DIR names, else a download.
t10k="${HVT_MNIST_T10K_DIR:-}"
if ! scripts/python.sh -m horovod_train mnist check --data-dir "$data_dir" >/dev/null 2>&1; then
  if [[ -n "$t10k" ]]; then
    echo "demo.sh: no MNIST in $data_dir; splitting the 10,000 test digits in $t10k (8,000 train, 2,000 test)"
    scripts/python.sh -m horovod_train mnist subset --source "$t10k" --data-dir "$data_dir"
  elif ! scripts/python.sh -m horovod_train mnist download --data-dir "$data_dir"; then
    echo "demo.sh: offline? set HVT_MNIST_T10K_DIR to a directory holding MNIST's test split (t10k-*-ubyte.gz), or see --help" >&2
    exit 2
  fi
fi

trainer=(python horovod_train/pytorch_mnist.py --data-dir "$data_dir" --epochs "$epochs" "$@")
if [[ $two_hosts -eq 1 ]]; then
  log_dir=runs/demo-two-hosts
  scripts/emulate_cluster.sh up
  trap 'scripts/emulate_cluster.sh down' EXIT
  set -x
  scripts/emulate_cluster.sh exec a -- horovodrun -np 4 -H a:2,b:2 "--$controller" \
    "${trainer[@]}" --log-dir "$log_dir"
else
  log_dir=runs/demo
  if [[ -z "$np" ]]; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    np=$(( gpus > 0 ? gpus : 2 ))
  fi
  set -x
  horovodrun -np "$np" -H "localhost:$np" "--$controller" "${trainer[@]}" --log-dir "$log_dir"
fi
{ set +x; } 2>/dev/null
echo "demo.sh: outputs in $log_dir/: summary.json, metrics.jsonl, checkpoints/, tensorboard/ (view: .venv/bin/tensorboard --logdir $log_dir)"

#!/usr/bin/env bash
# The README's test command: set up (or reuse) the environment, lint, then
# run the whole test suite for real (Horovod, OpenMPI, sshd in emulated
# hosts, each image run as two hosts), the images built beside the setup.
# Ends with the time of each phase.
set -euo pipefail

case "${1:-}" in
  -h|--help)
    cat <<'USAGE'
Usage: scripts/test.sh [PYTEST ARGS...]

Runs scripts/setup.sh for PyTorch, TensorFlow and MXNet, ruff, then pytest
with the given arguments (e.g. -k resume, -m "not cluster", tests/single).
As root, from the start, at the lowest I/O priority, scripts/build_image.sh
builds the GPU and the CPU image and the one that carries the code (all
fast when already done; each build's log in runs/image-builds/).
Without arguments, as root, the tests wait for them after the setup, then
the tests on the emulated hosts (tests/cluster) run here and the others
beside them, in their waits, at a lower CPU share, until this run, done
with the hosts, takes their last files: those others' output in
runs/tests-beside.log, their summary at the end. With arguments, the tests
run beside the builds, and the image tests wait for their image.
Tests on the emulated hosts and the images need root; elsewhere they are
skipped with the reason. Three tiers run only when named: scripts/test.sh
tests/distro (a bare Debian 13 set up and trained on) and scripts/test.sh
tests/cuda12 (the CUDA 12 image built and run), tens of minutes each, and
scripts/test.sh tests/preflight (every case of the preflight alone, ten
clean runs in a row, minutes).
USAGE
    exit 0 ;;
esac

cd "$(dirname "$0")/.."
phases=()
phase_started=$SECONDS
end_phase() {
  phases+=("$1 $((SECONDS - phase_started)) s")
  phase_started=$SECONDS
}
report() {
  local code=$?
  # A wheelhouse left half-filled is filled again next time (no COMPLETE mark).
  [[ -z "${builds_pid:-}" ]] || kill -- -"$builds_pid" 2>/dev/null || true
  [[ -z "${beside_pid:-}" ]] || kill -- -"$beside_pid" 2>/dev/null || true
  echo "test.sh: phase times: $(IFS=';'; echo "${phases[*]:-none}" | sed 's/;/, /g')"
  exit "$code"
}
trap report EXIT

# Runs "$@" (exec'd: the caller's $! is its session, and its process group,
# which report() ends) in a session of its own at nice $1 for the whole
# session: Linux shares the CPU between sessions first (autogroups), so a
# process's own nice would rank it only within its session, not against
# the tests here nor the ranks that ssh and Slurm start in sessions of
# their own. A process it starts that makes a session of its own
# (horovodrun's middleman calls setsid, and the ranks are its children)
# would leave that share: below nice 0, where cgroup v1's cpu controller is
# writable (root), the session also runs in a cpu group of that weight,
# which everything it starts stays in. Where the kernel has no autogroups,
# the process's own nice.
in_own_session() {
  exec setsid bash -c 'share=$1; shift
    cpu=/sys/fs/cgroup/cpu
    if (( share > 0 )) && [[ -w $cpu/cgroup.procs ]]; then
      weight=1024  # nice 0; each step of nice weighs 1.25 times less
      for ((step = 0; step < share; step++)); do weight=$((weight * 4 / 5)); done
      group=$cpu/horovod-train-nice$share
      { mkdir -p "$group" && echo "$weight" >"$group/cpu.shares" &&
        echo $$ >"$group/cgroup.procs"; } 2>/dev/null || true
    fi
    if [[ "$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)" == 1 ]]; then
      echo "$share" >/proc/self/autogroup && exec "$@"
    fi
    exec nice -n "$share" "$@"' in_own_session "$@"
}

# The images, built with podman from docker/ as the context (as users type
# it): the GPU one, the CPU one, then the one that carries the code (from
# the repository root, on the GPU one's layers), one after the other, from
# the start, in a session of their own at the lowest I/O priority: first
# their wheelhouse (network beside the setup's compiles), then each image
# beside the setup. Where the setup and a build would compile the same
# wheel, the second waits for the first and takes its wheel
# (docker/env/wheel_cache.py): both images take the setup's mpi4py, the CPU
# one its Horovod. The whole suite waits for them after the setup (the
# images phase): they share the cores with the setup, not with the tests
# (a session of their own at nice 0: Linux shares the CPU between sessions
# first). A selection of tests runs beside them, which then have the tests'
# leftover share (nice 10), and the image tests wait for their image. Each
# build writes DEVICE.log, then DEVICE.status (its exit code) and
# DEVICE.seconds, which the image tests wait for (tests/conftest.py). Root
# is needed for podman's storage and for running the images as emulated
# hosts.
builds=runs/image-builds
builds_pid=""
building=0
whole_suite=0
[[ $# -ne 0 ]] || whole_suite=1
if [[ $(id -u) -eq 0 ]]; then
  rm -rf "$builds" && mkdir -p "$builds"
  # shellcheck disable=SC2016  # expanded by the builds' own bash
  in_own_session "$((whole_suite ? 0 : 10))" bash -c 'builds=$1
    started=$SECONDS
    house=0
    scripts/build_image.sh --wheelhouse-only >"$builds/wheelhouse.log" 2>&1 || house=$?
    echo "$((SECONDS - started))" >"$builds/wheelhouse.seconds"
    for image in gpu cpu app; do
      started=$SECONDS
      if [[ $image == app ]]; then args=(--app); else args=(--device "$image"); fi
      code=$house
      if [[ $house != 0 ]]; then
        echo "filling the wheelhouse failed: $builds/wheelhouse.log" >"$builds/$image.log"
      else
        ionice -c 3 scripts/build_image.sh "${args[@]}" >"$builds/$image.log" 2>&1 || code=$?
      fi
      echo "$((SECONDS - started))" >"$builds/$image.seconds"
      echo "$code" >"$builds/$image.status.new" && mv "$builds/$image.status.new" "$builds/$image.status"
    done' build-images "$builds" &
  builds_pid=$!
  building=1
  export HVT_TEST_IMAGE_BUILDS="$PWD/$builds"
else
  echo "test.sh: not root: the images are not built and their tests will be skipped"
fi
# All three frameworks: the suite trains each of them for real. No GPU
# operations: the CPU image shares this Horovod wheel. A GPU setup of this
# checkout's .venv becomes the tests' one, said here.
if [[ "$(cat .venv/horovod-gpu-ops 2>/dev/null)" == nccl ]]; then
  echo "test.sh: .venv is set up for GPUs (Horovod with NCCL); the tests set it up for the" \
       "CPU with all three frameworks (scripts/setup.sh --frameworks pytorch --gpu-ops nccl" \
       "makes it the GPU one again, from the wheel cache)"
fi
scripts/setup.sh --frameworks pytorch,tensorflow,mxnet --gpu-ops none
end_phase setup

if (( whole_suite && building )); then
  wait "$builds_pid" || true
  builds_pid=""
  end_phase images
fi
.venv/bin/ruff check .
end_phase lint
set +e
if (( whole_suite && building )); then
  # The whole suite, as root: the tests on the emulated hosts (they mostly
  # wait: on hosts, Slurm, a fault's timeout) here, and the others beside
  # them, in those waits, at a lower share of the CPU (nice 10 in a session
  # of their own). The two share the others' files (tests/module_sharing.py):
  # the tests beside take them from the front, and once the emulated hosts'
  # tests are done, this pytest takes them from the back, so that neither
  # ends long before the other. The output beside goes to a log; its
  # summary follows this one's.
  beside_log=runs/tests-beside.log shared=runs/shared-modules
  rm -rf "$shared"
  echo "test.sh: the tests off the emulated hosts run beside them: $beside_log"
  in_own_session 10 .venv/bin/python -m pytest -m "not cluster" --share-modules "$shared" \
    --test-costs runs/test-costs-beside.jsonl >"$beside_log" 2>&1 &
  beside_pid=$!
  .venv/bin/python -m pytest --share-modules "$shared" --share-from back
  code=$?
  wait "$beside_pid"
  beside_code=$?
  beside_pid=""
  echo "test.sh: the tests beside ($beside_log has their whole output):"
  # From their costs table on; where pytest ended before it (an error in
  # collection), the log's end.
  if grep -q '^test costs by file' "$beside_log"; then
    sed -n '/^test costs by file/,$p' "$beside_log"
  else
    tail -n 40 "$beside_log"
  fi
  [[ $code != 0 ]] || code=$beside_code
else
  .venv/bin/python -m pytest "$@"
  code=$?
fi
set -e
end_phase tests

if (( building )); then
  [[ -z "$builds_pid" ]] || wait "$builds_pid" || true
  builds_pid=""
  where="beside the setup"
  (( whole_suite )) || where="beside the setup and the tests"
  phases+=("wheelhouse $(cat "$builds/wheelhouse.seconds" 2>/dev/null || echo '?') s ($where)")
  for image in gpu cpu app; do
    status=$(cat "$builds/$image.status" 2>/dev/null || echo "none")
    phases+=("$image image $(cat "$builds/$image.seconds" 2>/dev/null || echo '?') s ($where)")
    if [[ $status != 0 ]]; then
      tail -n 20 "$builds/$image.log" >&2 || true
      echo "test.sh: error: building the $image image failed (exit $status): $builds/$image.log" >&2
      code=1
    fi
  done
fi
exit "$code"

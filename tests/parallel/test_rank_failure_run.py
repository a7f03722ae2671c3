"""A killed rank under the TensorFlow and MXNet trainers, as
tests/cluster/test_rank_failure.py kills one under PyTorch's across the
emulated hosts: two ranks here, rank 1 killed (SIGKILL) after epoch 1; the
job ends at once, horovodrun's exit 1 naming the killed rank, nothing left
running. Rank 0, when it notices before horovodrun ends it, says so in its
one line, never a traceback."""

import re
import signal

import pytest
from conftest import require_framework, signal_rank_after_epoch_1, trainer_pids

SCRIPTS = {"tensorflow": ("TensorFlow", "tensorflow2_mnist.py"),
           "mxnet": ("MXNet", "mxnet_mnist.py")}


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_a_killed_rank_ends_the_job_at_once(framework, small_mnist_dir, tmp_path):
    name, script = SCRIPTS[framework]
    require_framework(name)
    log_dir = tmp_path / "run"
    code, output, ended_s = signal_rank_after_epoch_1(script, small_mnist_dir, log_dir,
                                                      signal.SIGKILL)
    assert code == 1, output[-3000:]
    assert "Process 1 exit with status code 137." in output, output[-3000:]
    assert ended_s < 30, ended_s  # at once, not after a timeout
    assert trainer_pids(log_dir, script) == {}
    # Rank 0 finds Horovod shut down, or its connection to rank 1 broken
    # (Gloo's error), or horovodrun ends it first.
    # horovodrun's own words and the ranks' forwarded lines are two writers
    # on one pipe: its "Process 1 exit ..." can end up in front of rank 0's
    # line, so the rank's line is matched from its prefix to the line's end.
    said = [line for line in output.splitlines() if f"{script}: error:" in line]
    assert len(said) <= 1, said
    assert all(re.search(rf"\[0\]<stderr>:{script}: error: Horovod stopped the job: "
                         r"[^\n]+ \(another rank ended or stopped answering\)$", line)
               for line in said), said
    assert "<stderr>:Traceback" not in output, output[-3000:]

"""Checkpoints: a round trip restores model and optimizer exactly; a foreign
or damaged file is refused with one line; a writer killed mid-write never
leaves a checkpoint that loads wrong."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from horovod_train.torch import checkpoint

WRITER = textwrap.dedent("""
    import sys, torch
    from horovod_train.torch import checkpoint
    model = torch.nn.Linear(4096, 2048)   # 32 MB: each write takes a while
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(1, 10_000):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(epoch)
        checkpoint.save(sys.argv[1], model, optimizer, "linear", epoch, {})
        print(epoch, flush=True)
""")


@pytest.mark.parametrize("delay_s", [0.05, 0.13, 0.31])
def test_writer_killed_mid_write_leaves_a_whole_checkpoint(tmp_path, delay_s):
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    first = writer.stdout.readline()  # one complete checkpoint exists
    assert first.strip() == "1"
    time.sleep(delay_s)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)

    state = checkpoint.load(tmp_path / "checkpoint.pt")
    epoch = state["epochs_done"]
    assert epoch >= 1
    # Every tensor holds the epoch the file claims: no mix of two writes.
    assert all(torch.all(t == epoch) for t in state["model"].values())

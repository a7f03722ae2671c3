"""What a run prints: whole lines, and progress that suits where it goes."""

import io
import time

from tqdm import tqdm

from horovod_train.core import console


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_say_writes_the_line_and_its_newline_at_once():
    writes = []

    class Recorder(io.StringIO):
        def write(self, text):
            writes.append(text)
            return len(text)

    console.say("epoch 1: done", Recorder())
    assert writes == ["epoch 1: done\n"]


def test_progress_is_a_bar_on_a_terminal():
    assert isinstance(console.progress(10, "epoch 1/1", enabled=True, stream=Terminal()), tqdm)


def test_progress_elsewhere_is_plain_lines_at_most_every_interval():
    log = io.StringIO()
    bar = console.progress(100, "epoch 2/3", enabled=True, every_s=0.05, stream=log)
    for _ in range(99):
        bar.update()
    assert log.getvalue() == ""  # the interval has not passed yet
    time.sleep(0.06)
    bar.update()  # the last batch: the epoch's own line follows, so no progress line
    bar = console.progress(100, "epoch 2/3", enabled=True, every_s=0.05, stream=log)
    bar.update(40)
    time.sleep(0.06)
    bar.update(10)
    bar.close()
    lines = log.getvalue().splitlines(keepends=True)
    assert len(lines) == 1 and "\r" not in lines[0]
    assert lines[0].startswith("epoch 2/3: 50/100 batches, ")
    assert lines[0].endswith(" batches/s\n")


def test_no_progress_prints_nothing():
    log = Terminal()
    bar = console.progress(3, "epoch 1/1", enabled=False, stream=log)
    bar.update()
    bar.close()
    assert log.getvalue() == ""

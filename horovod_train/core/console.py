"""What a run prints while it runs: whole lines, and progress that suits where
it goes (a bar on a terminal, plain lines in a log or under horovodrun)."""

import sys
import time

# Plain progress lines (stderr not a terminal): at most one this often, so a
# log of a long epoch shows it moving without filling up.
PROGRESS_LINE_EVERY_S = 10.0


def say(text: str, stream=None) -> None:
    """Print `text` and its newline in one write. print() writes them apart,
    and where Python is unbuffered (PYTHONUNBUFFERED, as the image sets)
    horovodrun's output forwarding can read the lone newline on its own and
    glue a stray `[1,0]<stdout>:` to the end of the line."""
    stream = stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()


class ProgressLines:
    """Progress as whole lines on a stream that is not a terminal: a bar's
    carriage returns arrive there as one long line, and under horovodrun
    with a `[0]<stderr>:` prefix repeated inside it."""

    def __init__(self, total: int, description: str, stream, every_s: float):
        self.total, self.description, self.stream = total, description, stream
        self.every_s = every_s
        self.done = 0
        self.started = self.last_line = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last_line >= self.every_s and self.done < self.total:
            self.last_line = now
            rate = self.done / (now - self.started)
            say(f"{self.description}: {self.done}/{self.total} batches, {rate:.1f} batches/s",
                self.stream)

    def close(self) -> None:
        pass


class NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress(total: int, description: str, enabled: bool,
             every_s: float = PROGRESS_LINE_EVERY_S, stream=None):
    """An epoch's progress (`update()` per batch, `close()`): a tqdm bar on a
    terminal, else a line every `every_s` seconds; nothing when not enabled
    (the other ranks, --no-progress)."""
    stream = stream or sys.stderr
    if not enabled:
        return NoProgress()
    if stream.isatty():
        from tqdm import tqdm  # here: errors.py imports this module under a bare python3

        return tqdm(total=total, desc=description, unit="batch", file=stream, mininterval=1.0,
                    dynamic_ncols=True)
    return ProgressLines(total, description, stream, every_s)

"""Two pytest runs of one suite sharing its test files (modules): each runs
a module the other has not taken, so that whichever is done first takes
the other's remaining work instead of leaving a core idle.

scripts/test.sh runs the tests on the emulated hosts (marked `cluster`) in
one pytest and the others beside it in a second. The second takes the
shared modules from the front; the first runs its tests on the hosts, then
takes shared modules from the back, until the two meet. Tests marked
`cluster` are never shared: they need the hosts, which only the first runs.

A module is taken by creating a file named for it in the directory both
runs are given (--share-modules DIR): creating it fails if it exists
(O_EXCL), so exactly one run takes each module, and a module's fixtures
are made once. A run given no such directory runs every test it collected,
as pytest does."""

import hashlib
import os
from pathlib import Path

import pytest

NOT_SHARED_MARKER = "cluster"


def pytest_addoption(parser):
    group = parser.getgroup("module sharing", "two pytest runs sharing the suite's modules")
    group.addoption("--share-modules", metavar="DIR", default=None,
                    help="run only the modules (test files) that no other run given the same "
                         "DIR has taken; tests marked cluster are not shared")
    group.addoption("--share-from", choices=("front", "back"), default="front",
                    help="take the shared modules from the front of the order (default) or "
                         "from the back, after the tests that are not shared")


class Queue:
    """This run's next test: the tests that are not shared first, in order,
    then the tests of each module this run takes, a module at a time."""

    def __init__(self, items: list, claims: Path, from_back: bool):
        self.claims = claims
        self.own: list = []
        modules: dict[str, list] = {}
        for item in items:
            if item.get_closest_marker(NOT_SHARED_MARKER):
                self.own.append(item)
            else:
                modules.setdefault(item.nodeid.split("::")[0], []).append(item)
        self.modules = list(modules.items())
        if from_back:
            self.modules.reverse()
        self.current: list = []

    def take(self, module: str) -> bool:
        name = hashlib.sha1(module.encode()).hexdigest()
        try:
            os.close(os.open(self.claims / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def next(self):
        """The next test to run, or None when none is left for this run. A
        module is taken when its first test is asked for: pytest asks for
        the test after the one it runs, to know which fixtures to keep."""
        if self.own:
            return self.own.pop(0)
        while not self.current and self.modules:
            module, tests = self.modules.pop(0)
            if self.take(module):
                self.current = list(tests)
        return self.current.pop(0) if self.current else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    claims = session.config.getoption("--share-modules")
    if claims is None or session.config.option.collectonly:
        return None  # pytest's own loop
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    Path(claims).mkdir(parents=True, exist_ok=True)
    queue = Queue(session.items, Path(claims), session.config.getoption("--share-from") == "back")
    item = queue.next()
    while item is not None:
        nextitem = queue.next()
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        item = nextitem
    return True


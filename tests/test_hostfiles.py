"""The hostfiles say what their names say, read by Horovod's own parser."""

import pytest
from conftest import REPO
from horovod.runner.common.util import hosts

LAYOUTS = {"1x1": {"a": 1}, "1x2": {"a": 2}, "2x1": {"a": 1, "b": 1}, "2x2": {"a": 2, "b": 2},
           "2x4": {"a": 4, "b": 4}}


@pytest.mark.parametrize("name, expected", LAYOUTS.items())
def test_hostfile_matches_its_layout(name, expected):
    parsed = hosts.parse_hosts(hosts.parse_host_files(str(REPO / "hostfiles" / name)))
    assert {h.hostname: h.slots for h in parsed} == expected

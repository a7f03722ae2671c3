"""benchmarks/machine.py: the machine every benchmark JSON records, read on
this machine (no GPU needed: the GPU list is then empty)."""

import datetime
import json
import os
import subprocess

from conftest import REPO

from benchmarks.machine import machine_record


def test_the_record_names_this_machine_and_the_checkouts_commit():
    record = machine_record()
    assert set(record) == {"hostname", "cpu_model", "cpu_cores", "memory_gib", "gpus",
                           "date_utc", "commit", "tree_clean"}
    assert record["cpu_model"]
    assert record["cpu_cores"] == os.cpu_count()
    assert record["memory_gib"] > 0
    for gpu in record["gpus"]:
        assert gpu["name"] and set(gpu) == {"name", "driver"}
    date = datetime.datetime.fromisoformat(record["date_utc"])
    assert date.utcoffset() == datetime.timedelta(0)
    assert abs(datetime.datetime.now(datetime.UTC) - date) < datetime.timedelta(minutes=5)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert record["commit"] == head
    assert isinstance(record["tree_clean"], bool)
    json.dumps(record)  # it goes into JSON as it is

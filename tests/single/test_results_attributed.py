"""Every committed result names the machine it ran on and the commit it ran
at (benchmarks/machine.py's result_origin, whichever shape the result was
written in); a prediction names the commit it was computed at and where its
inputs came from."""

import json
import re
from pathlib import Path

import pytest
from conftest import REPO, committed_results

from benchmarks.machine import MACHINE_NAME, MEMORY_NOT_RECORDED, is_prediction, result_origin


def missing(name: str) -> list[str]:
    record = json.loads((REPO / name).read_text())
    return result_origin(record, predicted=is_prediction(Path(name))).missing


def test_every_committed_result_names_its_machine_and_commit():
    names = committed_results(".json")
    assert len(names) > 50  # the listing worked
    lacking = {}
    for name in names:
        gaps = missing(name)
        if gaps:
            lacking[name] = gaps
    assert not lacking, "results that do not name their machine and commit:\n" + "\n".join(
        f"  {name}: no {'; no '.join(gaps)}" for name, gaps in sorted(lacking.items()))



# A record speaks of the project alone: paths it ran with are placeholders
# (DATA_DIR, LOG_DIR, OUT_DIR), never a folder of the machine it ran on.
# (/home/user is the distro tier's own user inside the bare tree it builds.)
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|work|root)/[\w.-]")


def test_no_committed_result_holds_a_path_of_the_machine_it_ran_on():
    holding = [f"  {name}: {match[0]}..." for name in committed_results(".json")
               if (match := MACHINE_PATH.search((REPO / name).read_text()))]
    assert not holding, "results that name a folder of their machine:\n" + "\n".join(holding)

SHA = "0123456789abcdef0123456789abcdef01234567"
MACHINE = {"hostname": "vm", "cpu_model": "Some CPU", "cpu_cores": 2, "memory_gib": 8.0,
           "gpus": [], "date_utc": "2026-01-01T00:00:00+00:00", "commit": SHA,
           "tree_clean": True}


def test_a_machine_record_names_both():
    origin = result_origin({"rows": [], "machine": MACHINE})
    assert origin.missing == []
    assert (origin.cpu_model, origin.commit, origin.tree_clean) == ("Some CPU", SHA, True)


def test_the_older_environment_block_names_all_but_the_memory():
    environment = {"cpu_model": "Some CPU", "cpu_cores": 2, "gpus": ["Some GPU"],
                   "git_commit": f"{SHA}-dirty"}
    origin = result_origin({"environment": environment})
    assert (origin.commit, origin.tree_clean) == (SHA, False)
    assert origin.gpus == [{"name": "Some GPU", "driver": None}]
    assert origin.missing == ["memory_gib"]


def test_a_summarys_commit_names_no_machine():
    origin = result_origin({"versions": {"commit": f"{SHA}+changes"}})
    assert (origin.commit, origin.tree_clean) == (SHA, False)
    assert origin.missing == [MACHINE_NAME, "cpu_cores", "memory_gib"]


def test_a_gpu_with_its_driver_names_the_machine_and_memory_may_be_unrecorded_if_said():
    gpu_host = {**MACHINE, "cpu_model": None, "memory_gib": None,
                "gpus": [{"name": "Some GPU", "driver": "1.0"}]}
    assert result_origin({"machine": gpu_host}).missing == ["memory_gib"]
    said = {**gpu_host, "attributed": f"added afterwards; {MEMORY_NOT_RECORDED}"}
    assert result_origin({"machine": said}).missing == []
    no_driver = {**said, "gpus": [{"name": "Some GPU", "driver": None}]}
    assert result_origin({"machine": no_driver}).missing == [MACHINE_NAME]


@pytest.mark.parametrize("record, gaps", [
    ({"machine": {"commit": SHA, "tree_clean": False}, "results": "x/results.json"}, []),
    ({"machine": {"commit": SHA, "tree_clean": False}, "comparisons": [{"source": "a paper"}]},
     []),
    ({"machine": {"commit": SHA, "tree_clean": False}, "source": {"images_per_sec": 1.0}},
     ["inputs' source"]),
    ({"command": "benchmarks/predict_scaling.py --images-per-sec 1"},
     ["commit", "whether the tree was clean"]),
])
def test_a_prediction_names_its_commit_and_inputs_not_a_machine(record, gaps):
    assert result_origin(record, predicted=True).missing == gaps


def test_predictions_are_told_by_their_paths():
    assert is_prediction(Path("benchmarks/results/predicted-x/results.json"))
    assert is_prediction(Path("benchmarks/results/cpu-2core-1gbit/prediction-mpi.json"))
    assert not is_prediction(Path("benchmarks/results/cpu-2core-predict-check/comparison.json"))

"""scripts/launch.sh's defaults for elastic runs: --blacklist-cooldown-range
and --elastic-timeout are added each where the user does not give it (on
the command line, or HOROVOD_ELASTIC_TIMEOUT for the timeout), and only to
runs horovodrun treats as elastic; read back with horovodrun's own parser."""

import pytest

from horovod_train.launch import horovodrun

COMMAND = ["python", "train.py", "--elastic-timeout", "7"]  # the trainer's, never looked at
DISCOVERY = ["--host-discovery-script", "discover.sh"]
DEFAULTS = ["--blacklist-cooldown-range", "5", "120", "--elastic-timeout", "300"]


def launched(argv: list[str], env: dict | None = None) -> list[str]:
    args = horovodrun.parse_horovodrun_args(argv)
    return horovodrun.with_elastic_defaults(args, argv, env or {})


@pytest.mark.parametrize("elastic", [["-np", "4", *DISCOVERY],
                                     ["-np", "4", "--min-np", "2", "-H", "a:2,b:2"]],
                         ids=["discovery script", "min-np"])
def test_elastic_runs_get_the_defaults(elastic):
    argv = [*elastic, *COMMAND]
    assert launched(argv) == [*DEFAULTS, *argv]
    args = horovodrun.parse_horovodrun_args(launched(argv))
    assert args.cooldown_range == [5, 120] and args.elastic_timeout == 300
    assert args.command == COMMAND


def test_what_the_user_gives_is_kept():
    argv = ["-np", "4", *DISCOVERY, "--blacklist-cooldown-range", "1", "3",
            "--elastic-timeout", "20", *COMMAND]
    assert launched(argv) == argv
    cooldown = ["-np", "4", *DISCOVERY, "--blacklist-cooldown-range", "1", "3", *COMMAND]
    assert launched(cooldown) == ["--elastic-timeout", "300", *cooldown]
    timeout = ["-np", "4", *DISCOVERY, "--elastic-timeout=20", *COMMAND]
    assert launched(timeout) == ["--blacklist-cooldown-range", "5", "120", *timeout]


def test_a_timeout_in_the_environment_is_kept():
    argv = ["-np", "4", *DISCOVERY, *COMMAND]
    assert launched(argv, {"HOROVOD_ELASTIC_TIMEOUT": "60"}) == [
        "--blacklist-cooldown-range", "5", "120", *argv]


def test_runs_that_are_not_elastic_are_left_alone():
    argv = ["-np", "4", "-H", "a:2,b:2", *COMMAND]
    assert launched(argv) == argv

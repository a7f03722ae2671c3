"""Any Horovod script on every path: which scripts are asked --check-options
(the mark they carry, never their name), the Slurm job's two ways to say
what the ranks run (HVT_TRAINER's options, or a python command) and their
refusals, --resume only where it is taken, and the plans that follow."""

from pathlib import Path

import pytest
from conftest import REPO

from horovod_train.core.errors import UserError
from horovod_train.launch import pipeline
from horovod_train.launch.allocation import allocation_from_env
from horovod_train.launch.job import Job
from horovod_train.launch.slurm import plan as slurm_plan

USER_SCRIPTS = REPO / "tests" / "user_scripts"
PYTHON = f"{REPO}/.venv/bin/python"
RANK_SCRIPT = ["-m", "horovod_train.core.rank_script"]


def allocation(restarts: str = "0"):
    return allocation_from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "a,b",
                                "SLURM_TASKS_PER_NODE": "2(x2)",
                                "SLURM_RESTART_COUNT": restarts})


@pytest.mark.parametrize("word, expected", [
    ("python", True), ("python3", True), ("python3.11", True), ("/opt/venv/bin/python", True),
    ("pythonw", False), ("ipython", False), ("bash", False), ("python3.x", False)])
def test_a_commands_python_is_known_by_its_name_on_any_path(word, expected):
    assert pipeline.is_python(word) is expected


@pytest.mark.parametrize("command, script", [
    (["python", "train.py", "--lr", "0.1"], "train.py"),
    (["/venv/bin/python3", "-u", "-B", "dir/train.py"], "dir/train.py"),
    (["python", "-m", "pkg.train"], None),
    (["python", "-c", "print(1)"], None),
    (["bash", "train.py"], None),
    (["python"], None),
    ([], None)])
def test_the_script_of_a_command_is_the_word_after_pythons_flags(command, script):
    assert pipeline.script_of(command) == script


def test_the_trainers_carry_the_mark_and_a_users_script_of_the_same_name_does_not(tmp_path):
    for trainer in ("pytorch_mnist.py", "tensorflow2_mnist.py", "mxnet_mnist.py"):
        assert pipeline.answers_option_check(REPO / "horovod_train" / trainer), trainer
    # Named as the trainer on purpose: a user's first script often is.
    assert not pipeline.answers_option_check(USER_SCRIPTS / "pytorch_mnist.py")
    assert not pipeline.answers_option_check(tmp_path / "missing.py")
    opted_in = tmp_path / "mine.py"
    opted_in.write_text(f"#!/usr/bin/env python3\n{pipeline.OPTION_CHECK_MARK}\nimport sys\n")
    assert pipeline.answers_option_check("mine.py", cwd=tmp_path)
    late = tmp_path / "late.py"
    late.write_text("\n" * pipeline.MARK_LINES + pipeline.OPTION_CHECK_MARK + "\n")
    assert not pipeline.answers_option_check(late)


def test_an_option_check_need_not_print_its_configuration():
    assert pipeline.configuration_of('noise\n{"elastic": true}\n') == {"elastic": True}
    assert pipeline.configuration_of("options fine\n") == {}
    assert pipeline.configuration_of("") == {}


def settings(**given) -> Job:
    return slurm_plan.make_settings(checkout=REPO, **given)


USER_SCRIPT = "tests/user_scripts/pytorch_mnist.py"


@pytest.mark.parametrize("job_args, program", [
    (["--epochs", "3"], slurm_plan.Program(slurm_plan.DEFAULT_TRAINER, ("--epochs", "3"),
                                           checked=True)),
    (["--", "--epochs", "3"], slurm_plan.Program(slurm_plan.DEFAULT_TRAINER,
                                                 ("--epochs", "3"), checked=True)),
    (["--", "python", USER_SCRIPT, "--epochs", "1"],
     slurm_plan.Program(USER_SCRIPT, ("--epochs", "1"))),
    (["python3", "-u", USER_SCRIPT], slurm_plan.Program(USER_SCRIPT, (), flags=("-u",))),
    (["--", "python", "-m", "my_package.train", "--lr", "1"],
     slurm_plan.Program("my_package.train", ("--lr", "1"), module=True)),
    (["--", "python", "horovod_train/mxnet_mnist.py"],
     slurm_plan.Program("horovod_train/mxnet_mnist.py", checked=True)),
])
def test_the_job_runs_the_trainers_options_or_a_python_command(job_args, program):
    assert slurm_plan.job_program(job_args, settings()) == program


def test_hvt_trainer_names_any_script_and_only_a_marked_one_is_checked():
    program = slurm_plan.job_program(["--epochs", "1"], settings(trainer=USER_SCRIPT))
    assert program == slurm_plan.Program(USER_SCRIPT, ("--epochs", "1"))


@pytest.mark.parametrize("job_args, given, message", [
    (["--", "ls", "-l"], {}, "the job's command must run Python: python SCRIPT ARGS or python "
                             "-m MODULE ARGS (the runtime's python); got ls -l"),
    (["--", "python", "-X", "dev", "x.py"], {}, "python -X dev x.py: the job runs python "
                                                "[-u -B -O -OO] SCRIPT ARGS or python -m "
                                                "MODULE ARGS"),
    (["--", "python", USER_SCRIPT], {"trainer": USER_SCRIPT},
     f"HVT_TRAINER={USER_SCRIPT} and the job's command (python {USER_SCRIPT} ...) both say "
     "what the ranks run: give one"),
    (["--", "python", "nope.py"], {}, f"nope.py: no such script in the checkout {REPO}"),
    (["--epochs", "1"], {"trainer": "/nope/train.py"}, "/nope/train.py: no such script"),
    (["--", "python", USER_SCRIPT], {"resume": True},
     f"HVT_RESUME=1 adds --resume, which {USER_SCRIPT} is not known to take (it carries no "
     f"`{pipeline.OPTION_CHECK_MARK}` line): let the script resume from its own checkpoint"),
])
def test_what_the_job_cannot_run_is_one_line_before_anything_starts(job_args, given, message):
    with pytest.raises(UserError) as raised:
        slurm_plan.make_plan(allocation(), settings(**given), job_args)
    assert str(raised.value) == message


def test_a_users_script_in_a_container_may_be_the_images_own():
    image = slurm_plan.make_settings(runtime="apptainer", image="x.sif", checkout=REPO)
    plan = slurm_plan.make_plan(allocation(), image, ["python", "/opt/app/train.py"])
    assert plan.check is None and plan.main[-2:] == [*RANK_SCRIPT[1:], "/opt/app/train.py"]


def test_a_users_script_is_run_as_it_is_by_either_launcher():
    """No option check, no --resume after a requeue (the script resumes by
    itself); under srun each rank prepared by rank_script first."""
    command = ["--", "python", "-u", USER_SCRIPT, "--epochs", "1"]
    plan = slurm_plan.make_plan(allocation(restarts="1"), settings(), command)
    assert plan.check is None
    assert plan.main[4:] == [PYTHON, "-u", *RANK_SCRIPT, USER_SCRIPT, "--epochs", "1"]
    over_ssh = slurm_plan.make_plan(allocation(), settings(launcher="horovodrun"), command)
    assert over_ssh.main[-5:] == [PYTHON, "-u", USER_SCRIPT, "--epochs", "1"]
    module = slurm_plan.make_plan(allocation(), settings(), ["python", "-m", "pkg.train"])
    assert module.check is None and module.main[4:] == [PYTHON, *RANK_SCRIPT, "-m", "pkg.train"]


def test_a_marked_script_is_checked_and_resumes_after_a_requeue(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "horovodrun").touch()
    (checkout / "mine.py").write_text(f"{pipeline.OPTION_CHECK_MARK}\n")
    mine = slurm_plan.make_settings(checkout=checkout)
    plan = slurm_plan.make_plan(allocation(restarts="1"), mine, ["python", "mine.py", "--x"])
    python = str(checkout / ".venv" / "bin" / "python")
    assert plan.check[4:] == [python, "mine.py", "--x", "--resume", "--check-options"]
    assert plan.main[-3:] == ["mine.py", "--x", "--resume"]
    assert Path(plan.cwd) == checkout

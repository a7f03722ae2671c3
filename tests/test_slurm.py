"""Horovod on Slurm: the allocation read as horovodrun's -np and -H, the
container command lines, and, against a real Slurm (slurmctld, a slurmd in
each of the emulated hosts a and b, munge; scripts/slurm/local_cluster.sh),
scripts/slurm/horovod.sbatch and scripts/slurm/submit.py training MNIST
across both hosts, a cancelled job resumed from its checkpoint, and a
Submitit job requeued by its pre-timeout signal."""

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, REPO

from horovod_train.errors import RunFailed, UserError
from horovod_train.launch import slurm
from horovod_train.launch.hosts import Host

SBATCH_SCRIPT = REPO / "scripts" / "slurm" / "horovod.sbatch"
SUBMIT = REPO / "scripts" / "slurm" / "submit.py"
LOCAL_CLUSTER = REPO / "scripts" / "slurm" / "local_cluster.sh"
SLURM_STATE = Path(os.environ.get("SLURM_STATE_DIR", "/run/horovod-train-slurm"))
JOB_TIMEOUT_S = 300


def allocation(nodelist="a,b", tasks="2(x2)", restarts="0") -> slurm.Allocation:
    return slurm.allocation_from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": nodelist,
                                      "SLURM_TASKS_PER_NODE": tasks,
                                      "SLURM_RESTART_COUNT": restarts})


# --- the allocation as horovodrun's hosts ----------------------------------------

@pytest.mark.parametrize("text, counts", [
    ("2", [2]),
    ("2(x2)", [2, 2]),
    ("4(x3),1", [4, 4, 4, 1]),
    ("1,2(x2)", [1, 2, 2]),
])
def test_tasks_per_node_expands_slurms_compressed_form(text, counts):
    assert slurm.expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "2(x)", "x2", "0", "2(x0)", "2(2)"])
def test_unreadable_tasks_per_node_is_one_error(text):
    with pytest.raises(UserError, match="SLURM_TASKS_PER_NODE"):
        slurm.expand_tasks_per_node(text)


def test_two_nodes_of_two_tasks_become_a2_b2():
    job = allocation()
    assert job.hosts == (Host("a", 2), Host("b", 2))  # the launcher's host model
    assert job.host_list == "a:2,b:2" and job.num_proc == 4 and job.nodes == ["a", "b"]


def test_uneven_tasks_keep_slurms_node_order():
    assert allocation("b,a,c", "2,1,3").host_list == "b:2,a:1,c:3"


def test_ntasks_per_node_is_used_when_tasks_per_node_is_missing():
    job = slurm.allocation_from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "a,b",
                                     "SLURM_NTASKS_PER_NODE": "3"})
    assert job.host_list == "a:3,b:3"


def test_outside_a_job_the_error_says_to_submit():
    with pytest.raises(UserError, match="not inside a Slurm job.*sbatch"):
        slurm.allocation_from_env({})


def test_nodes_and_counts_that_disagree_are_refused():
    with pytest.raises(UserError, match="counts 3 nodes, but SLURM_JOB_NODELIST=a,b has 2"):
        allocation("a,b", "1(x3)")


@pytest.fixture(scope="module")
def scontrol_conf(tmp_path_factory) -> dict:
    """A slurm.conf for `scontrol show hostnames`, which reads the
    configuration but asks no daemon."""
    # Installed here when missing (as root), as for the real Slurm below:
    # this fixture may run first.
    reason = slurm_skip_reason()
    if reason or shutil.which("scontrol") is None:
        pytest.skip(reason or "scontrol not installed (apt-get install slurm-client)")
    conf = tmp_path_factory.mktemp("scontrol") / "slurm.conf"
    conf.write_text("ClusterName=probe\nSlurmctldHost=ctl(127.0.0.1)\n"
                    "NodeName=a NodeAddr=127.0.0.1 CPUs=1\nPartitionName=p Nodes=a\n")
    return {**os.environ, "SLURM_CONF": str(conf)}


def test_compressed_nodelists_are_expanded_by_scontrol(scontrol_conf, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", scontrol_conf["SLURM_CONF"])
    assert slurm.node_hostnames("node[01-03],gpu7") == ["node01", "node02", "node03", "gpu7"]
    assert allocation("node[1-2]", "2(x2)").host_list == "node1:2,node2:2"
    with pytest.raises(UserError, match=r"node\[a-b\]: Invalid hostlist"):
        slurm.node_hostnames("node[a-b]")


# --- the commands ------------------------------------------------------------------

@pytest.fixture
def keys(tmp_path) -> Path:
    subprocess.run([str(REPO / "scripts" / "cluster_keys.sh"), str(tmp_path / "keys")],
                   check=True, capture_output=True)
    return tmp_path / "keys"


def test_venv_plan_runs_horovodrun_from_the_checkout():
    settings = slurm.make_settings(ssh_port="12345", checkout=REPO)
    plan = slurm.make_plan(allocation(), settings, ["--epochs", "3"])
    venv = f"{REPO}/.venv/bin"
    assert plan.main == [f"{venv}/horovodrun", "-np", "4", "-H", "a:2,b:2", "-p", "12345",
                         "--gloo", f"{venv}/python", "horovod_train/pytorch_mnist.py",
                         "--epochs", "3"]
    assert plan.cwd == str(REPO) and plan.sshd is None


def test_resume_is_added_when_asked_and_after_a_requeue():
    asked = slurm.make_settings(resume=True, checkout=REPO)
    assert slurm.make_plan(allocation(), asked, ["--epochs", "3"]).main[-1] == "--resume"
    plain = slurm.make_settings(checkout=REPO)
    requeued = slurm.make_plan(allocation(restarts="1"), plain, ["--epochs", "3"]).main
    assert requeued[-1] == "--resume"
    twice = slurm.make_plan(allocation(restarts="2"), asked, ["--resume"]).main
    assert twice.count("--resume") == 1
    assert "--resume" not in slurm.make_plan(allocation(), plain, []).main


def test_apptainer_plan_starts_the_images_sshd_then_horovodrun_inside_it(keys):
    settings = slurm.make_settings(runtime="apptainer", image="/images/horovod-train.sif",
                                   keys=str(keys), mounts="/scratch/mnist:/data:ro",
                                   checkout="/srv/checkout")
    plan = slurm.make_plan(allocation("a,b,c", "2(x3)"), settings, ["--data-dir", "/data"])
    container = ["apptainer", "exec", "--fakeroot", "--writable-tmpfs", "--pwd", "/workspace",
                 "--bind", f"{keys}:/etc/horovod/keys:ro", "--bind", "/srv/checkout:/workspace",
                 "--bind", "/scratch/mnist:/data:ro",
                 "--env", "CLUSTER_HOSTS=a b c", "--env", "SSH_PORT=12345",
                 "/images/horovod-train.sif", "/usr/local/bin/entrypoint.sh"]
    assert plan.sshd == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                         "--nodelist=b,c", *container, "sleep", "infinity"]
    assert plan.main == [*container, "/opt/venv/bin/horovodrun", "-np", "6", "-H",
                         "a:2,b:2,c:2", "-p", "12345", "--gloo", "/opt/venv/bin/python",
                         "horovod_train/pytorch_mnist.py", "--data-dir", "/data"]
    assert plan.ssh_hosts == ("b", "c") and plan.ssh_port == 12345


def test_pyxis_plan_uses_srun_container_options(keys):
    settings = slurm.make_settings(runtime="pyxis", image="nvcr.io#org/horovod-train:cpu",
                                   keys=str(keys), mounts="/scratch/runs:/runs", ssh_port=2222,
                                   checkout="/srv/checkout")
    plan = slurm.make_plan(allocation(), settings, ["--log-dir", "/runs/x"])
    container = ["--container-image=nvcr.io#org/horovod-train:cpu",
                 f"--container-mounts={keys}:/etc/horovod/keys:ro,/srv/checkout:/workspace,"
                 "/scratch/runs:/runs",
                 "--container-workdir=/workspace", "--container-remap-root",
                 "--container-writable", "--export=ALL,CLUSTER_HOSTS=a b,SSH_PORT=2222",
                 "/usr/local/bin/entrypoint.sh"]
    assert plan.sshd == ["srun", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
                         "--nodelist=b", *container, "sleep", "infinity"]
    assert plan.main == ["srun", "--nodes=1", "--ntasks=1", "--nodelist=a", *container,
                         "/opt/venv/bin/horovodrun", "-np", "4", "-H", "a:2,b:2", "-p", "2222",
                         "--gloo", "/opt/venv/bin/python", "horovod_train/pytorch_mnist.py",
                         "--log-dir", "/runs/x"]


def test_one_node_in_a_container_needs_no_sshd_step(keys):
    settings = slurm.make_settings(runtime="apptainer", image="x.sif", keys=str(keys))
    plan = slurm.make_plan(allocation("a", "4"), settings, [])
    assert plan.sshd is None and "horovodrun -np 4 -H a:4 -p 12345" in shlex.join(plan.main)


@pytest.mark.parametrize("settings, message", [
    ({"runtime": "docker"}, "HOROVOD_RUNTIME=docker: unknown runtime; use one of venv, "
                            "apptainer, pyxis"),
    ({"runtime": "pyxis"}, "HOROVOD_RUNTIME=pyxis needs HOROVOD_IMAGE"),
    ({"runtime": "apptainer", "image": "x.sif"}, "needs HOROVOD_KEYS"),
    ({"runtime": "apptainer", "image": "x.sif", "keys": "/nonexistent"},
     "HOROVOD_KEYS=/nonexistent has no authorized_keys"),
    ({"ssh_port": "ssh"}, "HOROVOD_SSH_PORT=ssh: want a port number"),
    ({"mounts": "/data:/data"}, "HOROVOD_MOUNTS is for the container runtimes"),
    ({"checkout": "/"}, "no /.venv/bin/horovodrun: run scripts/setup.sh"),
])
def test_bad_settings_are_one_error_naming_the_variable(settings, message):
    with pytest.raises(UserError) as error:
        slurm.make_settings(**{"checkout": REPO, **settings})
    assert message in str(error.value)


def test_bad_mount_is_refused(keys):
    with pytest.raises(UserError, match="HOROVOD_MOUNTS: 'data' is not SRC:DST"):
        slurm.make_settings(runtime="pyxis", image="i", keys=str(keys), mounts="data")


# --- the batch script and submit.py, without Slurm --------------------------------

def batch_script(env: dict, *args: str) -> subprocess.CompletedProcess:
    """The batch script as the batch step runs it: bash, in the checkout."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "HOROVOD_")) and k != "RESUME"}
    return subprocess.run(["bash", str(SBATCH_SCRIPT), *args], cwd=REPO, env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


JOB_ENV = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "a,b", "SLURM_TASKS_PER_NODE": "2(x2)"}


def test_batch_script_help_lists_its_settings():
    result = batch_script({}, "--help")
    assert result.returncode == 0
    for name in ("HOROVOD_RUNTIME", "HOROVOD_IMAGE", "HOROVOD_KEYS", "HOROVOD_SSH_PORT",
                 "RESUME=1", "apptainer", "pyxis"):
        assert name in result.stdout, name


@pytest.mark.parametrize("env, message", [
    ({}, "slurm: error: not inside a Slurm job"),
    ({**JOB_ENV, "HOROVOD_RUNTIME": "docker"}, "slurm: error: HOROVOD_RUNTIME=docker: unknown"),
    ({**JOB_ENV, "RESUME": "maybe"}, "slurm: error: RESUME=maybe: want 1 or 0"),
    ({**JOB_ENV, "HOROVOD_TRAIN_DIR": "/"}, "horovod.sbatch: error: / is not a horovod-train "
                                            "checkout"),
])
def test_batch_script_bad_input_is_one_line_and_exit_2(env, message):
    result = batch_script(env, "--epochs", "1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_batch_script_dry_run_prints_the_container_commands(keys):
    env = {**JOB_ENV, "HOROVOD_DRY_RUN": "1", "HOROVOD_RUNTIME": "apptainer",
           "HOROVOD_IMAGE": "/images/horovod-train.sif", "HOROVOD_KEYS": str(keys),
           "RESUME": "1"}
    result = batch_script(env, "--data-dir", "/data")
    assert result.returncode == 0, result.stderr
    settings = slurm.make_settings(runtime="apptainer", image="/images/horovod-train.sif",
                                   keys=str(keys), resume=True)
    plan = slurm.make_plan(allocation(), settings, ["--data-dir", "/data"])
    assert f"slurm: sshd step: {shlex.join(plan.sshd)}" in result.stdout
    assert f"slurm: run: {shlex.join(plan.main)}" in result.stdout
    assert plan.main[-1] == "--resume"


def test_submit_help_and_bad_settings_before_submitting():
    result = subprocess.run([str(BIN / "python"), str(SUBMIT), "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0
    for option in ("--nodes", "--tasks-per-node", "--gpus-per-node", "--partition", "--time",
                   "--no-wait", "--resume", "--runtime", "--image"):
        assert option in result.stdout, option
    bad = subprocess.run([str(BIN / "python"), str(SUBMIT), "--runtime", "pyxis"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("submit: error: HOROVOD_RUNTIME=pyxis needs HOROVOD_IMAGE, "
                                  "the image to run")


# --- a real Slurm ------------------------------------------------------------------

def slurm_skip_reason() -> str | None:
    """None when Slurm and munge are here, installing them when missing (as root)."""
    if all(shutil.which(p) or Path(f"/usr/sbin/{p}").exists()
           for p in ("slurmctld", "slurmd", "munged", "sbatch")):
        return None
    if os.geteuid() != 0:
        return "Slurm is not installed; installing it needs root: apt-get install slurm-wlm munge"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "slurm-wlm", "munge"]):
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            return f"could not install Slurm ({' '.join(command)}): {last}"
    return None


class LocalSlurm:
    def __init__(self, env: dict):
        self.env = env

    def run(self, *command: str, timeout: int = 60) -> subprocess.CompletedProcess:
        return subprocess.run(command, capture_output=True, text=True, env=self.env,
                              timeout=timeout)

    def job(self, job_id: str) -> dict:
        """`scontrol show job`'s fields (finished jobs stay for MinJobAge)."""
        line = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(f.split("=", 1) for f in line.split() if "=" in f)

    def wait(self, job_id: str, states: set[str], timeout_s: float = JOB_TIMEOUT_S) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            time.sleep(1)
        raise AssertionError(f"job {job_id} not {states} within {timeout_s:.0f} s: "
                             f"{self.job(job_id).get('JobState')}")

    def sbatch(self, log_dir: Path, trainer_args: list[str], **variables: str) -> str:
        """sbatch scripts/slurm/horovod.sbatch from the checkout, the job's log in
        log_dir; returns the job id."""
        env = ",".join(f"{name}={value}" for name, value in variables.items())
        result = subprocess.run(["sbatch", "--parsable", f"--output={log_dir}/horovod-%j.out",
                                 f"--export=ALL,HOROVOD_SSH_PORT=12345{',' + env if env else ''}",
                                 str(SBATCH_SCRIPT), *trainer_args],
                                cwd=REPO, capture_output=True, text=True, env=self.env,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().split(";")[0]


@pytest.fixture(scope="module")
def local_slurm(emulated):
    """scripts/slurm/local_cluster.sh up over the emulated hosts a and b for
    this module; down at its end, also when tests fail."""
    reason = slurm_skip_reason()
    if reason:
        pytest.skip(reason)
    emulated.ensure()
    try:
        up = subprocess.run([str(LOCAL_CLUSTER), "up"], capture_output=True, text=True,
                            timeout=180)
        assert up.returncode == 0, up.stderr
        env = {**os.environ, "SLURM_CONF": str(SLURM_STATE / "slurm.conf"),
               "PATH": f"{BIN}:{os.environ['PATH']}"}
        yield LocalSlurm(env)
    finally:
        subprocess.run([str(LOCAL_CLUSTER), "down"], capture_output=True, timeout=120)
        assert not SLURM_STATE.exists()


def trainer(mnist_dir: Path, log_dir: Path, epochs: int) -> list[str]:
    return ["--data-dir", str(mnist_dir), "--no-download", "--epochs", str(epochs),
            "--no-progress", "--log-dir", str(log_dir)]


def trainer_processes(host: str) -> list[int]:
    """Trainer processes left in an emulated host (ranks started over ssh
    are outside Slurm's process tracking)."""
    pids = subprocess.run(["ip", "netns", "pids", f"hvt-{host}"], capture_output=True,
                          text=True).stdout.split()
    found = []
    for pid in pids:
        try:
            if b"pytorch_mnist.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def measured(name: str, value) -> None:
    print(f"\nMEASURED {name}: {value}")


@pytest.mark.slow
@pytest.mark.cluster
def test_local_slurm_has_both_hosts_idle(local_slurm, cluster):
    nodes = local_slurm.run("sinfo", "-h", "-N", "-o", "%N %T %c").stdout.split("\n")
    assert sorted(line for line in nodes if line) == ["a idle 2", "b idle 2"]


@pytest.mark.cluster
def test_sshd_wait_returns_when_the_hosts_answer_and_fails_when_the_step_dies(cluster):
    """What a container job waits for before horovodrun: every other node's
    sshd (here the emulated hosts' own), unless the step starting them died."""
    addresses = tuple(cluster["hosts"].values())
    alive = subprocess.Popen(["sleep", "30"])
    try:
        slurm.wait_for_sshd(addresses, 12345, alive, timeout_s=30)
    finally:
        alive.kill()
        alive.wait()
    assert not slurm.ssh_answers(addresses[0], 1)
    dead = subprocess.Popen(["false"])
    dead.wait()
    with pytest.raises(RunFailed, match="the containers' sshd step ended .exit 1. before"):
        slurm.wait_for_sshd(addresses, 1, dead, timeout_s=30)


@pytest.mark.slow
@pytest.mark.cluster
def test_sbatch_trains_across_two_nodes(local_slurm, cluster, mnist_dir, tmp_path):
    """sbatch -N 2 --ntasks-per-node=2 scripts/slurm/horovod.sbatch: horovodrun
    -np 4 -H a:2,b:2 from node a, 4 ranks, the real digits learnt."""
    started = time.monotonic()
    job_id = local_slurm.sbatch(tmp_path, trainer(mnist_dir, tmp_path / "run", 3))
    final = local_slurm.wait(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
    log = (tmp_path / f"horovod-{job_id}.out").read_text()
    assert final["JobState"] == "COMPLETED" and final["ExitCode"] == "0:0", log[-3000:]
    assert f"slurm: job {job_id}: 4 ranks on a:2,b:2 (runtime venv)" in log
    assert "horovodrun -np 4 -H a:2,b:2 -p 12345 --gloo" in log
    assert final["BatchHost"] == "a" and final["NodeList"] == "a,b"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["size"] == 4 and summary["hosts"] == {"a": 2, "b": 2}
    assert summary["weights_identical"] is True
    assert summary["test_accuracy"] >= 0.95, summary["test_accuracy"]
    measured("sbatch 2x2, 3 epochs: Slurm RunTime", final["RunTime"])
    measured("sbatch 2x2, 3 epochs: submit to COMPLETED (s)", round(time.monotonic() - started))
    measured("sbatch 2x2, 3 epochs: trainer wall time (s)", round(summary["wall_time_s"], 1))
    measured("sbatch 2x2, 3 epochs: test accuracy", summary["test_accuracy"])


@pytest.mark.slow
@pytest.mark.cluster
def test_cancelled_job_resubmitted_with_resume_continues_from_its_checkpoint(
        local_slurm, cluster, mnist_dir, tmp_path):
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "checkpoint.pt"
    first = local_slurm.sbatch(tmp_path, trainer(mnist_dir, run, 3))
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not checkpoint.exists():
        assert local_slurm.job(first)["JobState"] in ("PENDING", "RUNNING"), \
            (tmp_path / f"horovod-{first}.out").read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.5)
    time.sleep(3)  # into the next epoch: the work a cancel loses
    epochs_done = len((run / "metrics.jsonl").read_text().splitlines())
    assert local_slurm.run("scancel", first).returncode == 0
    cancelled_at = time.time()
    lost_s = cancelled_at - checkpoint.stat().st_mtime
    assert local_slurm.wait(first, {"CANCELLED"}, 60)["JobState"] == "CANCELLED"
    # The ranks on b were started by ssh, outside Slurm's tracking: they end
    # when horovodrun (killed by Slurm on a) takes their connections down.
    deadline = time.monotonic() + 60
    while trainer_processes("a") + trainer_processes("b"):
        assert time.monotonic() < deadline, "trainer processes left after scancel"
        time.sleep(0.5)
    ranks_gone_s = time.time() - cancelled_at

    second = local_slurm.sbatch(tmp_path, trainer(mnist_dir, run, 3), RESUME="1")
    final = local_slurm.wait(second, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
    log = (tmp_path / f"horovod-{second}.out").read_text()
    assert final["JobState"] == "COMPLETED", log[-3000:]
    resumed = re.search(r"resuming after epoch (\d+)", log)
    assert resumed and int(resumed[1]) == epochs_done >= 1, log[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_after_epoch"] == epochs_done
    assert summary["size"] == 4 and summary["hosts"] == {"a": 2, "b": 2}
    assert summary["test_accuracy"] >= 0.95, summary["test_accuracy"]
    # Every epoch once: the cancelled epoch was redone, not logged twice.
    metrics = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in metrics] == [1, 2, 3]
    measured("scancel: epochs kept by the checkpoint", epochs_done)
    measured("scancel: training lost (s since the checkpoint)", round(lost_s, 1))
    measured("scancel: all ranks gone after (s)", round(ranks_gone_s, 1))
    measured("resubmitted job RunTime", final["RunTime"])


def submit(local_slurm: LocalSlurm, *args: str, timeout: int = JOB_TIMEOUT_S):
    return subprocess.run([str(BIN / "python"), str(SUBMIT), *args], cwd=REPO,
                          capture_output=True, text=True, env=local_slurm.env, timeout=timeout)


@pytest.mark.slow
@pytest.mark.cluster
def test_submitit_job_trains_across_two_nodes(local_slurm, cluster, mnist_dir, tmp_path):
    result = submit(local_slurm, "--nodes", "2", "--tasks-per-node", "2", "--time", "10",
                    "--folder", str(tmp_path / "submitit"), "--ssh-port", "12345", "--",
                    *trainer(mnist_dir, tmp_path / "run", 2))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    submitted = re.search(r"submit: job (\d+) submitted \(2 nodes x 2 tasks\); log: (\S+)",
                          result.stdout)
    assert submitted, result.stdout
    job_id, log = submitted[1], Path(submitted[2])
    assert f"submit: job {job_id} COMPLETED after" in result.stdout
    assert "'exit_code': 0" in result.stdout
    assert "horovodrun -np 4 -H a:2,b:2 -p 12345 --gloo" in log.read_text()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["size"] == 4 and summary["hosts"] == {"a": 2, "b": 2}
    assert summary["test_accuracy"] >= 0.95, summary["test_accuracy"]
    assert local_slurm.job(job_id)["JobState"] == "COMPLETED"


@pytest.mark.slow
@pytest.mark.cluster
def test_submitit_job_signalled_before_its_time_limit_requeues_and_resumes(
        local_slurm, cluster, mnist_dir, tmp_path):
    """The pre-timeout signal (sent here at once, with scancel): Submitit calls
    HorovodJob.checkpoint(), which adds --resume, and requeues the job."""
    run = tmp_path / "run"
    result = submit(local_slurm, "--no-wait", "--time", "10", "--folder",
                    str(tmp_path / "submitit"), "--ssh-port", "12345", "--",
                    *trainer(mnist_dir, run, 3), timeout=60)
    assert result.returncode == 0, result.stderr
    job_id, log = re.search(r"job (\d+) submitted .*; log: (\S+)", result.stdout).groups()
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (run / "checkpoints" / "checkpoint.pt").exists():
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.5)
    signalled_at = time.monotonic()
    assert local_slurm.run("scancel", "--batch", "--signal=USR2", job_id).returncode == 0
    final = local_slurm.wait(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
    text = Path(log).read_text()
    assert final["JobState"] == "COMPLETED" and final["Restarts"] == "1", text[-3000:]
    # Submitit caught the signal, called HorovodJob.checkpoint() and requeued the job.
    assert "Caught signal SIGUSR2" in text and "Calling checkpoint method" in text, text[:3000]
    assert f"Requeued job {job_id}" in text
    resumed = re.search(r"resuming after epoch (\d+)", text)
    assert resumed and int(resumed[1]) >= 1, text[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["test_accuracy"] >= 0.95 and summary["hosts"] == {"a": 2, "b": 2}
    measured("submitit requeue: signal to COMPLETED (s)", round(time.monotonic() - signalled_at))

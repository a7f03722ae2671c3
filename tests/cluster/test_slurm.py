"""Horovod on Slurm: the allocation read as ranks and hosts, the commands
of each launcher and runtime, and, against a real Slurm (slurmctld, a
slurmd in each of the emulated hosts a and b with their decoy interfaces,
munge, accounting; scripts/slurm/local_cluster.sh), scripts/slurm/horovod.sbatch
training MNIST with its ranks as Slurm tasks (a job cancelled and resumed
from its checkpoint) beside horovodrun over ssh, every bad input ending the
job in one line, and a Submitit job requeued by its pre-timeout signal."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from checklists import as_run_here, blocks
from conftest import BIN, REPO, firewall_on_b, interface_renamed, require_framework
from entry_faults import BAD_TRAINER_OPTION, NETWORK_LOCAL, NETWORK_MISSING, SSH_REFUSED_ON_B

from horovod_train.core.errors import RunFailed, UserError
from horovod_train.core.interfaces import Interface
from horovod_train.core.slurm_tasks import expand_tasks_per_node
from horovod_train.emulation import slurm as slurm_emulation
from horovod_train.launch import network, openmpi
from horovod_train.launch.allocation import Allocation, allocation_from_env, node_hostnames
from horovod_train.launch.hosts import Host
from horovod_train.launch.slurm import plan as slurm_plan
from horovod_train.launch.slurm import sbatch as slurm_job
from horovod_train.launch.slurm import submit

SBATCH_SCRIPT = REPO / "scripts" / "slurm" / "horovod.sbatch"
SUBMIT = REPO / "scripts" / "slurm" / "submit.sh"
LOCAL_CLUSTER = REPO / "scripts" / "slurm" / "local_cluster.sh"
SLURM_STATE = Path(os.environ.get("HVT_SLURM_STATE_DIR", "/run/horovod-train-slurm"))
JOB_TIMEOUT_S = 300


def allocation(nodelist="a,b", tasks="2(x2)", restarts="0") -> Allocation:
    return allocation_from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": nodelist,
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
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "2(x)", "x2", "0", "2(x0)", "2(2)"])
def test_unreadable_tasks_per_node_is_one_error(text):
    with pytest.raises(UserError, match="SLURM_TASKS_PER_NODE"):
        expand_tasks_per_node(text)


def test_two_nodes_of_two_tasks_become_a2_b2():
    job = allocation()
    assert job.hosts == (Host("a", 2), Host("b", 2))  # the launcher's host model
    assert job.host_list == "a:2,b:2" and job.num_proc == 4 and job.nodes == ["a", "b"]


def test_uneven_tasks_keep_slurms_node_order():
    assert allocation("b,a,c", "2,1,3").host_list == "b:2,a:1,c:3"


def test_ntasks_per_node_is_used_when_tasks_per_node_is_missing():
    job = allocation_from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "a,b",
                               "SLURM_NTASKS_PER_NODE": "3"})
    assert job.host_list == "a:3,b:3"


def test_outside_a_job_the_error_says_to_submit():
    with pytest.raises(UserError, match="not inside a Slurm job.*sbatch"):
        allocation_from_env({})


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
    assert node_hostnames("node[01-03],gpu7") == ["node01", "node02", "node03", "gpu7"]
    assert allocation("node[1-2]", "2(x2)").host_list == "node1:2,node2:2"
    with pytest.raises(UserError, match=r"node\[a-b\]: Invalid hostlist"):
        node_hostnames("node[a-b]")


# --- the commands ------------------------------------------------------------------

@pytest.fixture
def keys(tmp_path) -> Path:
    subprocess.run([str(REPO / "scripts" / "cluster_keys.sh"), str(tmp_path / "keys")],
                   check=True, capture_output=True)
    return tmp_path / "keys"


PYTHON = f"{REPO}/.venv/bin/python"
def probe_step(checkout=REPO) -> list[str]:
    """The network probe's step: the batch step's Python, in the checkout."""
    return ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--mpi=none",
            "--input=all", f"--chdir={checkout}", sys.executable, "-m",
            "horovod_train.core.interfaces", "probe"]


PROBE = probe_step()


def test_srun_plan_checks_the_options_probes_the_network_then_starts_a_rank_per_task():
    settings = slurm_plan.make_settings(checkout=REPO)
    plan = slurm_plan.make_plan(allocation(), settings, ["--epochs", "3"])
    trainer = ["horovod_train/pytorch_mnist.py", "--epochs", "3"]
    assert plan.check == ["srun", "--nodes=1", "--ntasks=1", "--mpi=none", PYTHON, *trainer,
                          "--check-options"]
    assert plan.probe == PROBE
    assert plan.main == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=4",
                         PYTHON, "-m", "horovod_train.core.rank_script", *trainer]
    assert plan.cwd == str(REPO) and plan.sshd is None


def test_srun_passes_the_jobs_cpus_per_task_and_fewer_ranks_when_asked():
    job = allocation_from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "a,b",
                               "SLURM_TASKS_PER_NODE": "2(x2)",
                               "SLURM_CPUS_PER_TASK": "8"})
    plan = slurm_plan.make_plan(job, slurm_plan.make_settings(checkout=REPO, num_proc="3"), [])
    assert plan.main[:5] == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=3",
                             "--cpus-per-task=8"]


def test_horovodrun_plan_runs_it_from_the_checkout_with_the_probes_choice():
    """The job probes for horovodrun too, and hands it the choice (names
    where every node has them, else networks in CIDR form)."""
    settings = slurm_plan.make_settings(launcher="horovodrun", checkout=REPO)
    plan = slurm_plan.make_plan(allocation(), settings, ["--epochs", "3"])
    venv = f"{REPO}/.venv/bin"
    # No -p: the nodes' ssh configuration decides, as for launch.sh.
    assert plan.main == [f"{venv}/horovodrun", "-np", "4", "-H", "a:2,b:2", "--gloo",
                         f"{venv}/python", "horovod_train/pytorch_mnist.py", "--epochs", "3"]
    assert plan.cwd == str(REPO) and plan.sshd is None and plan.probe == PROBE
    choice = network.Choice([network.Network("10.0.0.0/24", {
        "a": Interface("eth0", True, False, "10.0.0.11/24"),
        "b": Interface("ens5", True, False, "10.0.0.12/24")}, True)], False, {})
    chosen = slurm_plan.make_plan(allocation(), settings, ["--epochs", "3"], choice)
    assert chosen.main[:8] == [f"{venv}/horovodrun", "-np", "4", "-H", "a:2,b:2",
                               "--network-interfaces", "10.0.0.0/24", "--gloo"]


def test_resume_is_added_when_asked_and_after_a_requeue():
    asked = slurm_plan.make_settings(resume=True, checkout=REPO)
    assert slurm_plan.make_plan(allocation(), asked, ["--epochs", "3"]).main[-1] == "--resume"
    plain = slurm_plan.make_settings(checkout=REPO)
    requeued = slurm_plan.make_plan(allocation(restarts="1"), plain, ["--epochs", "3"])
    assert requeued.main[-1] == "--resume" and requeued.check[-2:] == ["--resume",
                                                                       "--check-options"]
    twice = slurm_plan.make_plan(allocation(restarts="2"), asked, ["--resume"]).main
    assert twice.count("--resume") == 1
    assert "--resume" not in slurm_plan.make_plan(allocation(), plain, []).main


def test_srun_in_apptainer_runs_each_rank_in_the_image_without_sshd():
    settings = slurm_plan.make_settings(runtime="apptainer", image="/images/horovod-train.sif",
                                   mounts="/scratch/mnist:/data:ro", checkout=REPO)
    plan = slurm_plan.make_plan(allocation(), settings, ["--data-dir", "/data"])
    container = ["apptainer", "exec", "--nv", "--pwd", "/workspace",
                 "--bind", f"{REPO}:/workspace", "--bind", "/scratch/mnist:/data:ro",
                 "/images/horovod-train.sif", "/opt/venv/bin/python"]
    trainer = ["horovod_train/pytorch_mnist.py", "--data-dir", "/data"]
    assert plan.main == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=4",
                         *container, "-m", "horovod_train.core.rank_script", *trainer]
    assert plan.check == ["srun", "--nodes=1", "--ntasks=1", "--mpi=none", *container,
                          *trainer, "--check-options"]
    assert plan.cwd is None and plan.sshd is None
    assert plan.probe == probe_step(REPO)


def test_srun_in_pyxis_gives_srun_the_container_options():
    settings = slurm_plan.make_settings(runtime="pyxis", image="nvcr.io#org/horovod-train:cpu",
                                   mounts="/scratch/runs:/runs", checkout=REPO)
    plan = slurm_plan.make_plan(allocation(), settings, ["--log-dir", "/runs/x"])
    assert plan.main == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=4",
                         "--container-image=nvcr.io#org/horovod-train:cpu",
                         f"--container-mounts={REPO}:/workspace,/scratch/runs:/runs",
                         "--container-workdir=/workspace", "/opt/venv/bin/python",
                         "-m", "horovod_train.core.rank_script",
                         "horovod_train/pytorch_mnist.py", "--log-dir", "/runs/x"]


def test_horovodrun_in_apptainer_starts_the_images_sshd_then_horovodrun_inside_it(keys):
    settings = slurm_plan.make_settings(launcher="horovodrun", runtime="apptainer",
                                   image="/images/horovod-train.sif", keys=str(keys),
                                   mounts="/scratch/mnist:/data:ro", checkout=REPO)
    plan = slurm_plan.make_plan(allocation("a,b,c", "2(x3)"), settings, ["--data-dir", "/data"])
    container = ["apptainer", "exec", "--nv", "--fakeroot", "--writable-tmpfs", "--no-home",
                 "--pwd", "/workspace",
                 "--bind", f"{keys}:/etc/horovod/keys:ro", "--bind", f"{REPO}:/workspace",
                 "--bind", "/scratch/mnist:/data:ro",
                 "--env", "HVT_CLUSTER_HOSTS=a b c", "--env", "HVT_SSH_PORT=12345",
                 "/images/horovod-train.sif", "/usr/local/bin/entrypoint.sh"]
    assert plan.sshd == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                         "--nodelist=b,c", *container, "sleep", "infinity"]
    assert plan.main == [*container, "/opt/venv/bin/horovodrun", "-np", "6", "-H",
                         "a:2,b:2,c:2", "-p", "12345", "--gloo", "/opt/venv/bin/python",
                         "horovod_train/pytorch_mnist.py", "--data-dir", "/data"]
    assert plan.ssh_hosts == ("b", "c") and plan.ssh_port == 12345


def test_horovodrun_in_pyxis_uses_srun_container_options(keys):
    settings = slurm_plan.make_settings(launcher="horovodrun", runtime="pyxis",
                                   image="nvcr.io#org/horovod-train:cpu", keys=str(keys),
                                   mounts="/scratch/runs:/runs", ssh_port=2222,
                                   checkout=REPO)
    plan = slurm_plan.make_plan(allocation(), settings, ["--log-dir", "/runs/x"])
    container = ["--container-image=nvcr.io#org/horovod-train:cpu",
                 f"--container-mounts={keys}:/etc/horovod/keys:ro,{REPO}:/workspace,"
                 "/scratch/runs:/runs",
                 "--container-workdir=/workspace", "--container-remap-root",
                 "--container-writable", "--export=ALL,HVT_CLUSTER_HOSTS=a b,HVT_SSH_PORT=2222",
                 "/usr/local/bin/entrypoint.sh"]
    assert plan.sshd == ["srun", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
                         "--nodelist=b", *container, "sleep", "infinity"]
    assert plan.main == ["srun", "--nodes=1", "--ntasks=1", "--nodelist=a", *container,
                         "/opt/venv/bin/horovodrun", "-np", "4", "-H", "a:2,b:2", "-p", "2222",
                         "--gloo", "/opt/venv/bin/python", "horovod_train/pytorch_mnist.py",
                         "--log-dir", "/runs/x"]


def test_one_node_in_a_container_needs_no_sshd_step(keys):
    settings = slurm_plan.make_settings(launcher="horovodrun", runtime="apptainer", image="x.sif",
                                   keys=str(keys))
    plan = slurm_plan.make_plan(allocation("a", "4"), settings, [])
    assert plan.sshd is None and "horovodrun -np 4 -H a:4 -p 12345" in shlex.join(plan.main)


@pytest.mark.parametrize("settings, message", [
    ({"launcher": "mpirun"}, "HVT_LAUNCHER=mpirun: unknown launcher; use one of srun, "
                             "horovodrun"),
    ({"runtime": "docker"}, "HVT_RUNTIME=docker: unknown runtime; use one of venv, "
                            "apptainer, pyxis"),
    ({"runtime": "pyxis"}, "HVT_RUNTIME=pyxis needs HVT_IMAGE"),
    ({"launcher": "horovodrun", "runtime": "apptainer", "image": "x.sif"},
     "needs HVT_KEYS"),
    ({"launcher": "horovodrun", "runtime": "apptainer", "image": "x.sif",
      "keys": "/nonexistent"}, "HVT_KEYS=/nonexistent has no authorized_keys"),
    ({"ssh_port": "12345"}, "HVT_SSH_PORT is for HVT_LAUNCHER=horovodrun: srun starts "
                            "the ranks without ssh"),
    ({"launcher": "horovodrun", "ssh_port": "ssh"}, "HVT_SSH_PORT=ssh: want a port number"),
    ({"mounts": "/data:/data"}, "HVT_MOUNTS is for the container runtimes"),
    ({"interfaces": "eth0,bad name"}, "HVT_NETWORK_INTERFACE=eth0,bad name: 'bad name' is not "
                                      "an interface name"),
    ({"num_proc": "0"}, "HVT_NUM_PROC=0: want a number of ranks, at least 1"),
    ({"checkout": "/"}, "no /.venv/bin/horovodrun: run scripts/setup.sh"),
])
def test_bad_settings_are_one_error_naming_the_variable(settings, message):
    with pytest.raises(UserError) as error:
        slurm_plan.make_settings(**{"checkout": REPO, **settings})
    assert message in str(error.value)


@pytest.mark.parametrize(("env", "said"), [
    ({"SLURM_GPUS_ON_NODE": "4"}, "4 GPUs (SLURM_GPUS_ON_NODE=4)"),
    ({"SLURM_JOB_GPUS": "0,1"}, "2 GPUs (SLURM_JOB_GPUS=0,1)"),
    ({"SLURM_GPUS_PER_TASK": "gpu:1"}, "GPUs (SLURM_GPUS_PER_TASK=gpu:1)"),
])
def test_a_cpu_build_in_a_job_given_gpus_is_one_line_before_anything_starts(tmp_path, env,
                                                                             said):
    """The Slurm page's setup on a login node without GPUs, run on GPU nodes."""
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    for program in ("python", "horovodrun"):
        (venv / "bin" / program).touch(mode=0o755)
    (venv / "horovod-build.json").write_text(json.dumps({"gpu_ops": "none"}))
    job_env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "a,b", "SLURM_TASKS_PER_NODE": "2(x2)",
               **env}
    (tmp_path / "train.py").write_text("import horovod.torch\n")
    settings = slurm_plan.make_settings(checkout=tmp_path)
    with pytest.raises(UserError) as refused:
        slurm_job.run_job(["python", "train.py"], job_env, settings)  # before any srun: none here
    assert str(refused.value).startswith(
        f"this Horovod is built for the CPU alone (--gpu-ops none), and host a has {said}: "
        "set it up with GPU operations (scripts/setup.sh --gpu-ops nccl"), refused.value
    # --no-cuda, no GPUs given, or a GPU build: nothing to refuse.
    slurm_job.check_gpu_build(replace(settings, cpu_only=True), job_env, "a")
    slurm_job.check_gpu_build(settings, {"SLURM_GPUS_ON_NODE": "0"}, "a")
    (venv / "horovod-build.json").write_text(json.dumps({"gpu_ops": "nccl"}))
    slurm_job.check_gpu_build(settings, job_env, "a")


def test_more_ranks_than_the_jobs_tasks_are_refused():
    with pytest.raises(UserError, match=r"^HVT_NUM_PROC=5 is more than the 4 tasks of job 7 "
                                        r"\(a:2,b:2\): lower it, or submit with more tasks$"):
        slurm_plan.make_plan(allocation(), slurm_plan.make_settings(checkout=REPO, num_proc=5), [])


def test_bad_mount_is_refused():
    with pytest.raises(UserError, match="HVT_MOUNTS: 'data' is not SRC:DST"):
        slurm_plan.make_settings(runtime="pyxis", image="i", mounts="data")


def test_open_mpi_and_the_ranks_get_the_networks_but_a_layer_the_user_set_keeps_its_own():
    """Gloo's and NCCL's names are each rank's own (tests/single/test_network.py)."""
    a, b = (Interface(name, True, False, address) for name, address in
            (("eth0", "10.0.0.11/24"), ("ens5", "10.0.0.12/24")))
    ib = [Interface("ib0", True, False, f"10.9.0.{n}/16") for n in (11, 12)]
    choice = network.Choice([network.Network("10.0.0.0/24", {"a": a, "b": b}, True),
                             network.Network("ib0", {"a": ib[0], "b": ib[1]}, False)],
                            False, {})
    no_site = {"OMPI_MCA_mca_param_files": "/nonexistent"}

    def networks(env: dict) -> dict:
        chosen = openmpi.srun_rank_environment(env, choice.cidrs)
        return {name: value for name, value in chosen.items()
                if "NETWORKS" in name or "_if_" in name}

    assert networks(no_site) == {
        "HVT_NETWORKS": "10.0.0.0/24,10.9.0.0/16",
        "OMPI_MCA_btl_tcp_if_include": "10.0.0.0/24,10.9.0.0/16",
        "OMPI_MCA_oob_tcp_if_include": "10.0.0.0/24,10.9.0.0/16"}
    mine = {"NCCL_SOCKET_IFNAME": "=ib0", "OMPI_MCA_btl_tcp_if_exclude": "lo,docker0"}
    assert networks({**no_site, **mine}) == {
        "HVT_NETWORKS": "10.0.0.0/24,10.9.0.0/16",
        "OMPI_MCA_oob_tcp_if_include": "10.0.0.0/24,10.9.0.0/16"}


# --- the batch script and submit.sh, without Slurm --------------------------------

def batch_script(env: dict, *args: str) -> subprocess.CompletedProcess:
    """The batch script as the batch step runs it: bash, in the checkout."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "HOROVOD_", "HVT_")) and k != "HVT_RESUME"}
    return subprocess.run(["bash", str(SBATCH_SCRIPT), *args], cwd=REPO, env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


JOB_ENV = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "a,b", "SLURM_TASKS_PER_NODE": "2(x2)"}


def test_batch_script_help_lists_its_settings():
    result = batch_script({}, "--help")
    assert result.returncode == 0
    for name in ("HVT_LAUNCHER", "HVT_NETWORK_INTERFACE", "HVT_NUM_PROC", "HVT_RUNTIME",
                 "HVT_IMAGE", "HVT_KEYS", "HVT_SSH_PORT", "HVT_RESUME=1", "apptainer",
                 "pyxis"):
        assert name in result.stdout, name


@pytest.mark.parametrize("env, message", [
    ({}, "slurm: error: not inside a Slurm job"),
    ({**JOB_ENV, "HVT_RUNTIME": "docker"}, "slurm: error: HVT_RUNTIME=docker: unknown"),
    ({**JOB_ENV, "HVT_LAUNCHER": "mpirun"}, "slurm: error: HVT_LAUNCHER=mpirun: unknown"),
    ({**JOB_ENV, "HVT_RESUME": "maybe"}, "slurm: error: HVT_RESUME=maybe: want 1 or 0"),
    ({**JOB_ENV, "HVT_TRAIN_DIR": "/"}, "horovod.sbatch: error: / is not a horovod-train "
                                            "checkout"),
])
def test_batch_script_bad_input_is_one_line_and_exit_2(env, message):
    result = batch_script(env, "--epochs", "1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("launcher", ["srun", "horovodrun"])
def test_batch_script_dry_run_prints_the_container_commands(keys, launcher):
    ssh = {"HVT_KEYS": str(keys)} if launcher == "horovodrun" else {}
    env = {**JOB_ENV, "HVT_DRY_RUN": "1", "HVT_LAUNCHER": launcher,
           "HVT_RUNTIME": "apptainer", "HVT_IMAGE": "/images/horovod-train.sif",
           "HVT_RESUME": "1", **ssh}
    result = batch_script(env, "--data-dir", "/data")
    assert result.returncode == 0, result.stderr
    settings = slurm_plan.make_settings(launcher=launcher, runtime="apptainer",
                                   image="/images/horovod-train.sif", resume=True,
                                   keys=ssh.get("HVT_KEYS"))
    plan = slurm_plan.make_plan(allocation(), settings, ["--data-dir", "/data"])
    lines = result.stdout.splitlines()
    how = ("each a Slurm task (srun --mpi=pmix)" if launcher == "srun"
           else "started by horovodrun over ssh")
    net = "chosen by the probe when the job runs"
    assert lines[0] == (f"slurm: job 42: 4 ranks on a:2,b:2, {how}, runtime apptainer; "
                        f"network {net}")
    assert f"slurm: check: {shlex.join(plan.check)}" in lines
    if launcher == "srun":
        assert f"slurm: probe: {shlex.join(plan.probe)}" in lines
    else:
        assert f"slurm: sshd step: {shlex.join(plan.sshd)}" in lines
    assert lines[-1] == f"slurm: run: {shlex.join(plan.main)}"
    assert plan.main[-1] == "--resume"


def test_submit_help_and_bad_settings_before_submitting():
    result = subprocess.run([str(SUBMIT), "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0
    for option in ("--nodes", "--tasks-per-node", "--gpus-per-node", "--partition", "--time",
                   "--no-wait", "--resume", "--launcher", "--network-interface", "--num-proc",
                   "--runtime", "--image"):
        assert option in result.stdout, option
    bad = subprocess.run([str(SUBMIT), "--runtime", "pyxis"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("submit: error: HVT_RUNTIME=pyxis needs HVT_IMAGE, "
                                  "the image to run")
    # The trainer's options, checked here before the queue (no Slurm needed to refuse).
    option = subprocess.run([str(SUBMIT), "--", "--epochs", "x"], capture_output=True,
                            text=True, timeout=60)
    assert option.returncode == 2
    assert option.stderr == f"submit: error: pytorch_mnist.py: {BAD_TRAINER_OPTION}\n"


def test_submit_gives_ranks_their_gpus_either_way_and_asks_for_the_preflight(tmp_path):
    pytest.importorskip("submitit")
    args, trainer_args = submit.parse_args(
        ["--nodes", "2", "--tasks-per-node", "4", "--gpus-per-task", "1", "--cpus-per-task", "8",
         "--preflight", "--folder", str(tmp_path), "--", "--epochs", "1"])
    sbatch = submit.make_executor(args).parameters["additional_parameters"]
    assert {key: sbatch[key] for key in ("nodes", "ntasks_per_node", "gpus_per_task",
                                          "cpus_per_task")} == {
        "nodes": 2, "ntasks_per_node": 4, "gpus_per_task": 1, "cpus_per_task": 8}
    assert "gpus_per_node" not in sbatch and args.preflight and trainer_args == ["--epochs", "1"]
    per_node, _ = submit.parse_args(["--gpus-per-node", "4", "--folder", str(tmp_path)])
    assert submit.make_executor(per_node).parameters["additional_parameters"]["gpus_per_node"] == 4
    both = subprocess.run([str(SUBMIT), "--gpus-per-node", "4", "--gpus-per-task", "1"],
                          capture_output=True, text=True, timeout=60)
    assert both.returncode == 2
    assert both.stderr.strip().splitlines() == ["submit: error: argument --gpus-per-task: not "
                                                "allowed with argument --gpus-per-node"]


# --- a real Slurm ------------------------------------------------------------------

SLURM_PACKAGES = ("slurm-wlm", "slurmdbd", "mariadb-server", "munge")


def slurm_skip_reason() -> str | None:
    """None when Slurm, its accounting and munge are here, installing them
    when missing (as root)."""
    if all(shutil.which(p) or Path(f"/usr/sbin/{p}").exists()
           for p in ("slurmctld", "slurmd", "slurmdbd", "munged", "sbatch", "mariadbd")):
        return None
    if os.geteuid() != 0:
        return ("Slurm is not installed; installing it needs root: apt-get install "
                + " ".join(SLURM_PACKAGES))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", *SLURM_PACKAGES]):
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            return f"could not install Slurm ({' '.join(command)}): {last}"
    return None


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


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
            time.sleep(0.5)
        # What it was doing, then the job ended, so the tests after it find
        # both nodes free.
        fields = self.job(job_id)
        steps = self.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i %j %N %M").stdout
        log = Path(fields.get("StdOut", "/nonexistent"))
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else "(no log)"
        self.run("scancel", job_id)
        raise AssertionError(f"job {job_id} not {states} within {timeout_s:.0f} s: "
                             f"{fields.get('JobState')}; its steps:\n{steps}its log's end:\n"
                             f"{tail}")

    def sbatch(self, log_dir: Path, trainer_args: list[str], sbatch_options: tuple = (),
               **variables: str) -> str:
        """sbatch [SBATCH_OPTIONS] scripts/slurm/horovod.sbatch from the
        checkout, the job's log in log_dir; returns the job id."""
        env = "".join(f",{name}={value}" for name, value in variables.items())
        result = subprocess.run(["sbatch", "--parsable", f"--output={log_dir}/horovod-%j.out",
                                 f"--export=ALL{env}", *sbatch_options, str(SBATCH_SCRIPT),
                                 *trainer_args],
                                cwd=REPO, capture_output=True, text=True, env=self.env,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().split(";")[0]

    def steps(self, job_id: str, timeout_s: float = 30) -> list[dict]:
        """sacct's steps of a finished job (slurmdbd records them a moment
        after the job ends)."""
        fields = ["JobID", "JobName", "NTasks", "NodeList", "State"]
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.run("sacct", "-j", job_id, "-n", "-P", "-o", ",".join(fields)).stdout
            rows = [dict(zip(fields, line.split("|"), strict=True))
                    for line in out.splitlines() if line]
            if rows and all(row["State"] in ENDED for row in rows):
                return rows
            assert time.monotonic() < deadline, f"sacct -j {job_id}: {out}"
            time.sleep(1)


@pytest.fixture(scope="module")
def local_slurm(emulated):
    """scripts/slurm/local_cluster.sh up over the emulated hosts a and b, with
    their decoy interfaces, for this module; down at its end, also when
    tests fail."""
    reason = slurm_skip_reason()
    if reason:
        pytest.skip(reason)
    emulated.ensure("--decoys")
    try:
        up = subprocess.run([str(LOCAL_CLUSTER), "up"], capture_output=True, text=True,
                            timeout=180)
        assert up.returncode == 0, up.stderr
        # The decoy eth1 never answers: every job's network probe waits its
        # connect timeout for it, 1 s here, not 3 (tests/single/test_network.py
        # holds the default).
        env = {**os.environ, "SLURM_CONF": str(SLURM_STATE / "slurm.conf"),
               "PATH": f"{BIN}:{os.environ['PATH']}", "HVT_PROBE_CONNECT_TIMEOUT_S": "1"}
        yield LocalSlurm(env)
    finally:
        subprocess.run([str(LOCAL_CLUSTER), "down"], capture_output=True, timeout=120)
        assert not SLURM_STATE.exists()


def trainer(mnist_dir: Path, log_dir: Path, epochs: int) -> list[str]:
    return ["--data-dir", str(mnist_dir), "--no-download", "--epochs", str(epochs),
            "--no-progress", "--log-dir", str(log_dir)]


OVER_SSH = {"HVT_LAUNCHER": "horovodrun"}  # no HVT_SSH_PORT: the hosts' sshd is on 22


def trainer_processes(host: str) -> dict[int, str]:
    """The trainer's processes in an emulated host, and the name of each
    one's parent: slurmstepd for a Slurm task, else what started it."""
    pids = subprocess.run(["ip", "netns", "pids", f"hvt-{host}"], capture_output=True,
                          text=True).stdout.split()
    found = {}
    for pid in pids:
        try:
            if b"pytorch_mnist.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
                found[int(pid)] = Path(f"/proc/{parent}/comm").read_text().strip()
        except OSError:
            pass
    return found


def measured(name: str, value) -> None:
    print(f"\nMEASURED {name}: {value}")


@pytest.mark.slow
@pytest.mark.cluster
def test_local_slurm_has_both_hosts_idle(local_slurm, decoy_cluster):
    nodes = local_slurm.run("sinfo", "-h", "-N", "-o", "%N %T %c").stdout.split("\n")
    assert sorted(line for line in nodes if line) == ["a idle 2", "b idle 2"]


@pytest.mark.cluster
def test_sshd_wait_returns_when_the_hosts_answer_and_fails_when_the_step_dies(decoy_cluster):
    """What a container job waits for before horovodrun: every other node's
    sshd (here the emulated hosts' own), unless the step starting them died."""
    addresses = tuple(decoy_cluster["hosts"].values())
    alive = subprocess.Popen(["sleep", "30"])
    try:
        slurm_job.wait_for_sshd(addresses, decoy_cluster["port"], alive, timeout_s=30)
    finally:
        alive.kill()
        alive.wait()
    assert not slurm_job.ssh_answers(addresses[0], 1)
    dead = subprocess.Popen(["false"])
    dead.wait()
    with pytest.raises(RunFailed, match="the containers' sshd step ended .exit 1. before"):
        slurm_job.wait_for_sshd(addresses, 1, dead, timeout_s=30)


def cluster_subnet(layout: dict) -> str:
    """The emulated hosts' network, eth0's, in CIDR form."""
    return layout["hosts"]["a"].rsplit(".", 1)[0] + ".0/24"


# The jobs that train to an accuracy: 2 epochs of mnist_dir on 4 ranks pass
# 95% (as test_rank_failure.py's do); a cancel or a signal falls in the second.
EPOCHS = 2


def run_until_cancelled(local_slurm: LocalSlurm, log_dir: Path, run: Path, mnist_dir: Path,
                        **variables: str) -> dict:
    """A 2-epoch job, cancelled half a second into epoch 2 (an epoch is a
    few seconds): how its ranks on b were started (their parents), the
    epochs its checkpoint kept, and how long after `scancel` its last rank
    on b and on a ended."""
    checkpoint = run / "checkpoints" / "checkpoint.pt"
    job_id = local_slurm.sbatch(log_dir, trainer(mnist_dir, run, EPOCHS), **variables)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not checkpoint.exists():
        assert local_slurm.job(job_id)["JobState"] in ("PENDING", "RUNNING"), \
            (log_dir / f"horovod-{job_id}.out").read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.2)
    parents = set(trainer_processes("b").values())
    time.sleep(0.5)  # into the next epoch: the work a cancel loses
    epochs_done = len((run / "metrics.jsonl").read_text().splitlines())
    assert local_slurm.run("scancel", job_id).returncode == 0
    cancelled_at = time.monotonic()
    gone = {}
    while len(gone) < 2:
        for name in ("a", "b"):
            if name not in gone and not trainer_processes(name):
                gone[name] = round(time.monotonic() - cancelled_at, 1)
        assert time.monotonic() - cancelled_at < 90, f"ranks left after scancel {job_id}"
        time.sleep(0.1)
    assert local_slurm.wait(job_id, {"CANCELLED"}, 60)["JobState"] == "CANCELLED"
    return {"job": job_id, "parents": parents, "epochs_done": epochs_done,
            "b_gone_s": gone["b"], "all_gone_s": max(gone.values())}


def resume_to_the_end(local_slurm: LocalSlurm, log_dir: Path, run: Path, mnist_dir: Path,
                      epochs_done: int, **variables: str) -> tuple[str, str, dict]:
    """The same job resubmitted with HVT_RESUME=1: it goes on after the
    epochs kept, logs every epoch once and ends COMPLETED."""
    job_id = local_slurm.sbatch(log_dir, trainer(mnist_dir, run, EPOCHS), HVT_RESUME="1",
                                **variables)
    final = local_slurm.wait(job_id, ENDED)
    log = (log_dir / f"horovod-{job_id}.out").read_text()
    log = log[log.index(f"slurm: job {job_id}: "):]
    assert final["JobState"] == "COMPLETED" and final["ExitCode"] == "0:0", log[-3000:]
    assert f"resuming after epoch {epochs_done}" in log, log[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_after_epoch"] == epochs_done >= 1
    assert summary["size"] == 4 and summary["hosts"] == {"a": 2, "b": 2}
    assert summary["weights_identical"] is True
    metrics = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in metrics] == list(range(1, EPOCHS + 1))
    return job_id, log, summary


def run_to_the_end(local_slurm: LocalSlurm, log_dir: Path, run: Path, mnist_dir: Path,
                   **variables: str) -> dict:
    """A 2-epoch job, uninterrupted: how its ranks on b were started (their
    parents), its log and summary."""
    job_id = local_slurm.sbatch(log_dir, trainer(mnist_dir, run, EPOCHS), **variables)
    parents, deadline = set(), time.monotonic() + JOB_TIMEOUT_S
    while not parents and local_slurm.job(job_id)["JobState"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "no rank on b in time"
        parents = set(trainer_processes("b").values())
        time.sleep(0.2)
    final = local_slurm.wait(job_id, ENDED)
    log = (log_dir / f"horovod-{job_id}.out").read_text()
    assert final["JobState"] == "COMPLETED" and final["ExitCode"] == "0:0", log[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["size"] == 4 and summary["hosts"] == {"a": 2, "b": 2}
    assert summary["weights_identical"] is True
    return {"parents": parents, "log": log, "summary": summary}


@pytest.mark.slow
@pytest.mark.cluster
def test_srun_ranks_are_slurm_tasks_that_scancel_ends_at_once_and_train_as_well_as_over_ssh(
        local_slurm, decoy_cluster, mnist_dir, tmp_path):
    """Both launchers side by side, on hosts whose decoy interfaces mislead
    plain Open MPI: srun's job cancelled in epoch 2, then resumed to the
    end, with b's eth0 called ens5 (the network is chosen, not the name);
    horovodrun's over ssh, from the first node, run to the end."""
    run = tmp_path / "srun"
    with interface_renamed("b", "eth0", "ens5"):
        cancelled = run_until_cancelled(local_slurm, tmp_path, run, mnist_dir)
        job_id, log, summary = resume_to_the_end(local_slurm, tmp_path, run, mnist_dir,
                                                 cancelled["epochs_done"])
    srun = {**cancelled, "resumed_job": job_id, "log": log, "summary": summary}
    ssh = run_to_the_end(local_slurm, tmp_path, tmp_path / "horovodrun", mnist_dir, **OVER_SSH)
    measured("srun: after scancel, the last rank on b gone (s)", cancelled["b_gone_s"])
    measured("srun: after scancel, every rank gone (s)", cancelled["all_gone_s"])
    for launcher, done in (("srun", srun), ("horovodrun", ssh)):
        measured(f"{launcher}: test accuracy", done["summary"]["test_accuracy"])
        measured(f"{launcher}: trainer wall time (s)", round(done["summary"]["wall_time_s"], 1))

    # Slurm started the ranks on b itself (slurmstepd), horovodrun over ssh did not.
    assert srun["parents"] == {"slurmstepd"}, srun["parents"]
    assert "slurmstepd" not in ssh["parents"] and ssh["parents"], ssh["parents"]
    assert srun["b_gone_s"] <= 5, srun
    # The srun job's first lines: the ranks as tasks, and the one network
    # that joins the hosts, whatever each calls it, each decoy named with
    # its reason.
    lines = srun["log"].splitlines()
    job = srun["resumed_job"]
    assert lines[0] == (f"slurm: job {job}: 4 ranks on a:2,b:2, each a Slurm task (srun "
                        f"--mpi=pmix), runtime venv; network {cluster_subnet(decoy_cluster)} on "
                        "a eth0, b ens5 (chosen)"), lines[:3]
    assert lines[1].startswith("slurm: network: not 127.0.0.0/8 on lo: loopback; not "
                               "172.17.0.0/16 on docker0: the same address 172.17.0.1 on a and "
                               "b"), lines[1]
    assert "; not 192.168.200.0/24 on eth1: a cannot reach b (eth1): " in lines[1], lines[1]
    assert lines[1].endswith("; not mgmt0: a cannot reach b: 192.168.202.12: Network is "
                             "unreachable"), lines[1]
    assert srun["summary"]["controller"] == "mpi"
    assert srun["summary"]["network_interface"] == "eth0"  # rank 0's, on a
    assert ssh["summary"]["controller"] == "gloo"
    assert ssh["summary"]["network_interface"] == "eth0"
    # The same training whichever starts the ranks (Gloo's and MPI's sums
    # may round apart in the last bits).
    assert srun["summary"]["test_accuracy"] >= 0.95
    assert srun["summary"]["test_accuracy"] >= ssh["summary"]["test_accuracy"] - 0.005
    # Slurm's accounting lists the ranks as the job's tasks.
    steps = {row["JobName"]: row for row in local_slurm.steps(job) if "." in row["JobID"]}
    assert steps["python"]["NTasks"] == "4" and steps["python"]["NodeList"] == "a,b"
    assert steps["python"]["State"] == "COMPLETED", steps


@pytest.fixture
def without_pmix(local_slurm):
    """The local cluster without Slurm's PMIx plugins, as on a site built
    without them: their links taken out of its plugin directory for one
    test (the job's srun reads the cluster's slurm.conf, whatever
    SLURM_CONF the submission had)."""
    plugins = SLURM_STATE / "plugins"
    taken = {link: link.readlink() for link in plugins.glob("mpi_pmix*.so")}
    assert taken, f"no PMIx plugin in {plugins}"
    for link in taken:
        link.unlink()
    try:
        yield
    finally:
        for link, target in taken.items():
            link.symlink_to(target)


@pytest.mark.cluster
def test_your_script_page_submits_as_written(local_slurm, decoy_cluster, small_mnist_dir,
                                             tmp_path):
    """The Slurm block of "Your own training script" (tests/checklists.py),
    each sbatch as written but for a rank on each node (the start barrier is
    across nodes, at half the cost), the test's digits and log: a user's
    Horovod script as the whole job, run as it is (its options are none of
    the trainer's, so an option check would have ended it). A PyTorch one
    under srun from the command form, each rank past the start barrier
    before the script's first line (core/rank_script.py); a Keras one under
    horovodrun, named by HVT_TRAINER. Both in the port range (HVT_PORTS) a
    firewall on b opens, with ssh and Slurm's own daemons, nothing else: the
    ranks keep inside it (Open MPI's transport under srun, Horovod's services
    and Gloo under horovodrun; the trainers take the same path, rank_script
    under srun, horovodrun's over ssh)."""
    commands = [command for block in blocks()
                if block.page == "your-script.md" and block.mark == "slurm"
                for command in block.commands]
    jobs = {"srun": commands[0], "horovodrun": commands[1]}
    assert "HVT_LAUNCHER=horovodrun" in jobs["horovodrun"] and "--" in jobs["srun"]
    slurm_ports = f"{slurm_emulation.SLURMCTLD_PORT}:{slurm_emulation.SLURMDBD_PORT}"
    for launcher, command in jobs.items():
        if launcher == "horovodrun":
            require_framework("TensorFlow")
        out = tmp_path / f"{launcher}.json"
        line = as_run_here(command, {
            "sbatch scripts/": f"sbatch --parsable --output={tmp_path}/horovod-%j.out "
                               "--ntasks-per-node=1 scripts/",
            "--epochs 3": "--epochs 1"})
        line += f" --data-dir {small_mnist_dir} --out {out}"
        with firewall_on_b(22, slurm_ports, "50000:50200"):
            submitted = subprocess.run(["bash", "-c", line], cwd=REPO, capture_output=True,
                                       text=True, timeout=60,
                                       env={**local_slurm.env, "HVT_PORTS": "50000-50200"})
            assert submitted.returncode == 0, submitted.stderr
            job_id = submitted.stdout.strip().split(";")[0]
            final = local_slurm.wait(job_id, ENDED, timeout_s=180)
        log = (tmp_path / f"horovod-{job_id}.out").read_text()
        assert final["JobState"] == "COMPLETED" and final["ExitCode"] == "0:0", log[-3000:]
        ran = json.loads(out.read_text())
        assert ran["size"] == 2 and ran["hosts"] == {"a": 1, "b": 1}, ran
        assert ran["same_weights"] is True
        assert ran["argv"] == ["--epochs", "1", "--data-dir", str(small_mnist_dir), "--out",
                               str(out)]
        assert ran["mpi"] is (launcher == "srun")
        assert ran["launcher_settings"].get("HVT_START_BARRIER") == (
            f"{decoy_cluster['hosts']['a']}:50200" if launcher == "srun" else None)
        assert ("epoch 1: loss" if launcher == "srun" else " - loss: ") in log, log[-3000:]


@pytest.mark.cluster
def test_a_tensorflow_script_is_the_job_under_srun(local_slurm, decoy_cluster, small_mnist_dir,
                                                   tmp_path):
    """A user's TensorFlow custom loop (hvd.DistributedGradientTape) as the
    whole job, each rank a Slurm task prepared by core/rank_script.py: the
    page's PyTorch one runs above, the Keras one under horovodrun."""
    require_framework("TensorFlow")
    out = tmp_path / "run.json"
    script_args = ["--data-dir", str(small_mnist_dir), "--epochs", "1", "--out", str(out)]
    command = ["--", "python", "tests/user_scripts/tensorflow2_mnist.py", *script_args]
    job_id = local_slurm.sbatch(tmp_path, command, ("--ntasks-per-node=1",))
    final = local_slurm.wait(job_id, ENDED, timeout_s=180)
    log = (tmp_path / f"horovod-{job_id}.out").read_text()
    assert final["JobState"] == "COMPLETED" and final["ExitCode"] == "0:0", log[-3000:]
    ran = json.loads(out.read_text())
    assert ran["size"] == 2 and ran["hosts"] == {"a": 1, "b": 1} and ran["mpi"] is True, ran
    assert ran["same_weights"] is True and ran["argv"] == script_args
    assert "epoch 1: loss" in log, log[-3000:]


@pytest.fixture
def ssh_refused_on_b():
    """Host b's sshd port refuses (a firewall rule inside b); Slurm's own
    ports stay open."""
    rule = ["INPUT", "-p", "tcp", "--dport", "22", "-j", "REJECT", "--reject-with", "tcp-reset"]
    iptables_in_b = ["ip", "netns", "exec", "hvt-b", "iptables"]
    subprocess.run([*iptables_in_b, "-A", *rule], check=True, timeout=30)
    yield
    subprocess.run([*iptables_in_b, "-D", *rule], check=True, timeout=30)


@pytest.mark.cluster
@pytest.mark.parametrize("case", ["ranks", "pmix", "option", "elastic", "interface", "missing",
                                  "layer", "ssh"])
def test_a_job_with_bad_input_ends_in_one_line_before_any_rank_starts(
        local_slurm, decoy_cluster, small_mnist_dir, tmp_path, request, case):
    """The words of a fault every entry point meets are tests/entry_faults.py's,
    the same as scripts/launch.sh's."""
    if case == "pmix":
        request.getfixturevalue("without_pmix")
    if case == "ssh":
        request.getfixturevalue("ssh_refused_on_b")
    args = trainer(small_mnist_dir, tmp_path / "run", 1)
    variables, expected = {
        "ranks": ({"HVT_NUM_PROC": "5"}, "HVT_NUM_PROC=5 is more than the 4 tasks of job {job} "
                                         "(a:2,b:2): lower it, or submit with more tasks"),
        "pmix": ({}, "srun offers no PMIx plugin (srun --mpi=list: none, cray_shasta, pmi2): the "
                 "ranks' Open MPI starts through PMIx; ask the site for Slurm's mpi/pmix, or "
                 "set HVT_LAUNCHER=horovodrun"),
        "option": ({}, f"pytorch_mnist.py: {BAD_TRAINER_OPTION}"),
        "elastic": ({}, "--elastic needs HVT_LAUNCHER=horovodrun: Horovod's elastic driver "
                        "starts and replaces the ranks itself"),
        "interface": ({"HVT_NETWORK_INTERFACE": "docker0"}, NETWORK_LOCAL),
        "missing": ({"HVT_NETWORK_INTERFACE": "nope"}, NETWORK_MISSING),
        "layer": ({"NCCL_SOCKET_IFNAME": "mgmt"},
                  "NCCL_SOCKET_IFNAME=mgmt: no interface it selects can carry the job: mgmt0: a "
                  "cannot reach b: 192.168.202.12: Network is unreachable"),
        "ssh": (OVER_SSH, SSH_REFUSED_ON_B.format(port=22)),
    }[case]
    extra = {"option": ["--epochs", "x"], "elastic": ["--elastic"]}.get(case, [])
    job_id = local_slurm.sbatch(tmp_path, [*args, *extra], **variables)
    final = local_slurm.wait(job_id, ENDED, timeout_s=120)
    log = (tmp_path / f"horovod-{job_id}.out").read_text()
    # Bad input exits 2; a network the probe finds cannot carry the job, 1
    # (launch/pipeline.py's convention, the same from scripts/launch.sh).
    code = "1:0" if case in ("interface", "missing", "layer") else "2:0"
    assert final["JobState"] == "FAILED" and final["ExitCode"] == code, log
    [line] = log.strip().splitlines()
    assert line.startswith("slurm: error: " + expected.format(job=job_id)), log
    assert case == "ssh" or line == "slurm: error: " + expected.format(job=job_id)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.cluster
def test_submitit_job_trains_and_resumes_after_its_pre_timeout_signal(
        local_slurm, decoy_cluster, mnist_dir, tmp_path):
    """submit.sh's job across both nodes, submit.sh waiting for it; its
    pre-timeout signal (sent here after epoch 1, with scancel): Submitit
    calls HorovodJob.checkpoint(), which adds --resume, and requeues the
    job (scontrol requeue, as a preemption does), whose ranks, Slurm tasks
    again, resume and end COMPLETED."""
    run = tmp_path / "run"
    submitting = subprocess.Popen(
        [str(SUBMIT), "--nodes", "2", "--tasks-per-node", "2",
         "--time", "10", "--folder", str(tmp_path / "submitit"), "--",
         *trainer(mnist_dir, run, EPOCHS)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=local_slurm.env)
    try:
        first = submitting.stdout.readline()
        submitted = re.search(r"submit: job (\d+) submitted \(2 nodes x 2 tasks\); "
                              r"log: (\S+)", first)
        assert submitted, first + submitting.stderr.read()
        job_id, log = submitted[1], Path(submitted[2])
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not (run / "checkpoints" / "checkpoint.pt").exists():
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.2)
        signalled_at = time.monotonic()
        assert local_slurm.run("scancel", "--batch", "--signal=USR2", job_id).returncode == 0
        rest, errors = submitting.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        submitting.kill()
    assert submitting.returncode == 0, rest + errors
    assert f"submit: job {job_id} COMPLETED after" in rest and "'exit_code': 0" in rest, rest
    final = local_slurm.job(job_id)
    text = log.read_text()
    assert final["JobState"] == "COMPLETED" and final["Restarts"] == "1", text[-3000:]
    # Submitit caught the signal, called HorovodJob.checkpoint() and requeued the job.
    assert "Caught signal SIGUSR2" in text and "Calling checkpoint method" in text, text[:3000]
    assert f"Requeued job {job_id}" in text
    assert f"slurm: job {job_id}: 4 ranks on a:2,b:2, each a Slurm task" in text
    assert f", restart 1; network {cluster_subnet(decoy_cluster)} on eth0 (chosen)" in text
    resumed = re.search(r"resuming after epoch (\d+)", text)
    assert resumed and int(resumed[1]) >= 1, text[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["test_accuracy"] >= 0.95 and summary["hosts"] == {"a": 2, "b": 2}
    assert summary["weights_identical"] is True
    measured("submitit requeue: signal to COMPLETED (s)", round(time.monotonic() - signalled_at))


@pytest.mark.slow
@pytest.mark.cluster
def test_slurm_cluster_page_submits_as_written(local_slurm, decoy_cluster, small_mnist_dir,
                                               tmp_path):
    """The checklist page "Your Slurm cluster" (tests/checklists.py): its
    submit.sh command, as written but for one GPU a task (the local nodes
    have none), a task a node (two a node are the srun and Submitit tests'),
    the test's digits and directories, trains across both nodes after the
    preflight found nothing."""
    [command] = [command for block in blocks()
                 if block.page == "slurm-cluster.md" and block.mark == "slurm"
                 for command in block.commands if command[0] == "scripts/slurm/submit.sh"]
    line = as_run_here(command, {
        "/shared/$USER/mnist": str(small_mnist_dir),
        "--tasks-per-node 4": "--tasks-per-node 1",
        "--preflight --": f"--preflight --folder {tmp_path / 'submitit'} --time 10 --"})
    line += f" --epochs 1 --log-dir {tmp_path / 'run'}"
    assert line.startswith("scripts/slurm/submit.sh --nodes 2 --tasks-per-node 1 --preflight")
    result = subprocess.run(["bash", "-c", line], cwd=REPO, env=local_slurm.env,
                            capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"submit: job \d+ COMPLETED after", result.stdout), result.stdout
    # The nodes checked first (--preflight, the job's HVT_PREFLIGHT=1), then the job.
    log = Path(re.search(r"; log: (\S+)", result.stdout)[1]).read_text()
    assert "preflight: all well, 2 hosts checked in " in log, log[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["hosts"] == {"a": 1, "b": 1} and summary["weights_identical"] is True


@pytest.mark.slow
@pytest.mark.cluster
def test_slurm_cluster_pages_sbatch_form_logs_where_it_ran_and_usr2_requeues_it(
        local_slurm, decoy_cluster, small_mnist_dir, tmp_path):
    """The same page's sbatch command as written (but a task a node, no
    GPUs, the test's digits): its log where sbatch ran, with no directory
    to make first; the page's `scancel --batch --signal=USR2` (a time
    limit's warning, horovod.sbatch's --signal=B:USR2@120) after epoch 1
    stops the ranks and requeues the job, which resumes and completes."""
    [command] = [command for block in blocks()
                 if block.page == "slurm-cluster.md" and block.mark == "slurm"
                 for command in block.commands if command[0] == "sbatch"]
    run = tmp_path / "run"
    line = as_run_here(command, {"/shared/$USER/mnist": str(small_mnist_dir),
                                 "sbatch --nodes": "sbatch --parsable --nodes",
                                 "--ntasks-per-node 4": "--ntasks-per-node 1"})
    line += f" --epochs 3 --log-dir {run}"
    assert line.startswith("sbatch --parsable --nodes 2 --ntasks-per-node 1 --export=ALL,"
                           "HVT_PREFLIGHT=1 scripts/slurm/horovod.sbatch"), line
    submitted = subprocess.run(["bash", "-c", line], cwd=REPO, env=local_slurm.env,
                               capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    log = REPO / f"horovod-{job_id}.out"
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not (run / "checkpoints" / "checkpoint.pt").exists():
            assert local_slurm.job(job_id)["JobState"] in ("PENDING", "RUNNING"), \
                log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.2)
        assert local_slurm.run("scancel", "--batch", "--signal=USR2", job_id).returncode == 0
        final = local_slurm.wait(job_id, ENDED)
        text = log.read_text()
    finally:
        log.unlink(missing_ok=True)
    assert final["JobState"] == "COMPLETED" and final["Restarts"] == "1", text[-3000:]
    assert f"slurm: job {job_id}: USR2: requeued; it resumes from the last checkpoint" in text
    assert "preflight: all well, 2 hosts checked in " in text, text[-3000:]
    resumed = re.search(r"resuming after epoch (\d+)", text)
    assert resumed and int(resumed[1]) >= 1, text[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["hosts"] == {"a": 1, "b": 1} and summary["weights_identical"] is True

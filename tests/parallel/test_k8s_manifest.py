"""docker/k8s/mpijob.yaml, the Kubeflow MPI Operator job, checked without a
cluster: against the MPIJob v2beta1 schema in docker/k8s/schema/, its pod
templates against Kubernetes' own schemas (kubernetes-validate, strict: unknown
fields fail), and its launch command, hosts, SSH port, image and keys against
what horovodrun, the trainer, the images (docker/Dockerfile, and
docker/app.Dockerfile's, which carries the code), the image's entrypoint and
the operator's per-job key expect; its pods against Kubernetes' "restricted"
Pod Security Standard (tests/pod_security.py). Each check is also shown
failing on a broken copy of the manifest. The InfiniBand/RoCE variant,
`kubectl kustomize docker/k8s` (rendered for real), passes the same checks
and adds IPC_LOCK and an RDMA device to the workers, which run as root for
it, and nothing else."""

import copy
import fnmatch
import json
import re
import shutil
import subprocess
import sys

import jsonschema
import kubernetes_validate
import pod_security
import pytest
import yaml
from conftest import REPO

from horovod_train.torch.options import parse_args as trainer_parse_args

MANIFEST_FILE = REPO / "docker" / "k8s" / "mpijob.yaml"
MANIFEST = yaml.safe_load(MANIFEST_FILE.read_text())
SCHEMA = json.loads((REPO / "docker" / "k8s" / "schema" / "mpijob-v2beta1.json").read_text())
DOCKERFILE = (REPO / "docker" / "Dockerfile").read_text()
# The image the pods run: the environment image plus the code.
APP_DOCKERFILE = (REPO / "docker" / "app.Dockerfile").read_text()
APP_IMAGE = "horovod-train-app"
ENTRYPOINT = (REPO / "docker" / "entrypoint.sh").read_text()
# The oldest and the newest Kubernetes whose schemas kubernetes-validate ships.
K8S_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
# Where the v2beta1 operator mounts the hostfile it writes (OpenMPI's
# OMPI_MCA_orte_default_hostfile points there too).
OPERATOR_HOSTFILE = "/etc/mpi/hostfile"
# What the v2beta1 operator mounts at sshAuthMountPath from its per-job
# Secret (an ECDSA P-521 key in PEM, despite the name).
OPERATOR_KEY_FILES = ("id_rsa", "id_rsa.pub", "authorized_keys")


def replica(job, kind):
    return job["spec"]["mpiReplicaSpecs"][kind]


def container(job, kind):
    return replica(job, kind)["template"]["spec"]["containers"][0]


def env(job, kind):
    return {e["name"]: e["value"] for e in container(job, kind).get("env", [])}


def volume_for(job, kind, mount_path):
    """The pod volume mounted at mount_path in the main container, or None."""
    mounts = {m["mountPath"]: m["name"] for m in container(job, kind).get("volumeMounts", [])}
    if mount_path not in mounts:
        return None
    volumes = replica(job, kind)["template"]["spec"].get("volumes", [])
    return next(v for v in volumes if v["name"] == mounts[mount_path])


def operator_hostnames(job, namespace="default"):
    """The worker names the operator writes into the hostfile (OpenMPI:
    '<job>-worker-<i>.<job>.<namespace>.svc slots=<slotsPerWorker>')."""
    name = job["metadata"]["name"]
    return [f"{name}-worker-{i}.{name}.{namespace}.svc"
            for i in range(replica(job, "Worker")["replicas"])]


def horovodrun_argv(job):
    """The launcher's horovodrun arguments, after the entrypoint."""
    launcher = container(job, "Launcher")
    argv = launcher.get("command", []) + launcher.get("args", [])
    return argv[argv.index("horovodrun") + 1:] if "horovodrun" in argv else []


def launch_options(argv):
    """-np, --hostfile, -p and the command, read as horovodrun reads them
    (test_horovod_reads_the_command_so shows Horovod's own parser agrees)."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int)
    parser.add_argument("-hostfile", "--hostfile", dest="hostfile")
    parser.add_argument("-p", "--ssh-port", dest="ssh_port", type=int)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser.parse_known_args(argv)[0]


def dockerfile_final_stage():
    return DOCKERFILE.split("\nFROM ")[-1]


def image_setting(pattern):
    """The app image's setting: app.Dockerfile's own if it sets one, else the
    environment image's, which it inherits."""
    for text in (APP_DOCKERFILE, dockerfile_final_stage()):
        found = re.findall(pattern, text, re.M)
        if found:
            return found[-1]
    return None


def schema_errors(job):
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(job))


def pod_template_errors(job, version):
    """kubernetes-validate's error for each replica's template, wrapped in a
    core/v1 PodTemplate, in strict mode."""
    errors = {}
    for kind, spec in job["spec"]["mpiReplicaSpecs"].items():
        pod_template = {"apiVersion": "v1", "kind": "PodTemplate",
                        "metadata": {"name": f"{job['metadata']['name']}-{kind.lower()}"},
                        "template": spec["template"]}
        try:
            kubernetes_validate.validate(pod_template, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            errors[kind] = f"{'/'.join(map(str, err.absolute_path))}: {err.message}"
    return errors


def image_uid():
    """The uid the image runs as (docker/Dockerfile's HVT_UID default)."""
    return int(re.search(r"^ARG HVT_UID=(\d+)$", DOCKERFILE, re.M).group(1))


def problems(job):
    """Everything in the job that does not fit the trainer, the image or the
    operator; [] for a good job."""
    found = []
    spec = job["spec"]
    workers = replica(job, "Worker")["replicas"]
    slots = spec.get("slotsPerWorker", 1)

    # One rank per GPU: slots = GPUs per worker, ranks = workers x slots.
    gpus = container(job, "Worker").get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if gpus != slots:
        found.append(f"slotsPerWorker {slots} != nvidia.com/gpu per worker {gpus}")
    if "nvidia.com/gpu" in container(job, "Launcher").get("resources", {}).get("limits", {}):
        found.append("the launcher runs no rank and needs no GPU")
    if spec.get("runLauncherAsWorker"):
        found.append("runLauncherAsWorker adds the launcher to the hostfile")
    options = launch_options(horovodrun_argv(job))
    if options.num_proc != workers * slots:
        found.append(f"-np {options.num_proc} != {workers} workers x {slots} slots")
    if options.hostfile != OPERATOR_HOSTFILE:
        found.append(f"--hostfile {options.hostfile}, not the operator's {OPERATOR_HOSTFILE}")

    # Every container starts through the image's entrypoint (host key, keys,
    # ssh config, sshd): a worker without a command would get "sshd -De".
    entrypoint = image_setting(r'^ENTRYPOINT \["([^"]+)"\]')
    workdir = image_setting(r"^WORKDIR (\S+)")
    for kind in ("Launcher", "Worker"):
        main = container(job, kind)
        # The code comes with the image: docker/app.Dockerfile's.
        name = main.get("image", "").rsplit("/", 1)[-1].split(":")[0]
        if name != APP_IMAGE:
            found.append(f"{kind} image {main.get('image')} is not {APP_IMAGE}, "
                         "the image that carries the code")
        if main.get("command", [None])[0] != entrypoint:
            found.append(f"{kind} does not start with the image's entrypoint {entrypoint}")
        if main.get("workingDir", workdir) != workdir:
            found.append(f"{kind} workingDir {main['workingDir']} != the image's {workdir}")

    # The trainer: a file of the checkout, options its own parser accepts,
    # its data directory mounted where the ranks run.
    command = options.command
    if command[:1] != ["python"] or len(command) < 2:
        found.append(f"the ranks' command {command} is not `python SCRIPT ...`")
    else:
        script = command[1]
        if not (REPO / script).is_file():
            found.append(f"{script} is not in the repository")
        # The app image copies the repository to its workdir, where the
        # script is read: a volume mounted there would hide it.
        if not re.search(rf"^COPY \. {re.escape(workdir)}/?$", APP_DOCKERFILE, re.M):
            found.append(f"docker/app.Dockerfile does not copy the repository to {workdir}")
        for kind in ("Launcher", "Worker"):
            if volume_for(job, kind, workdir) is not None:
                found.append(f"{kind}: a volume at {workdir} hides the image's code, "
                             f"where {script} is read")
        try:
            trainer = trainer_parse_args(command[2:])
        except SystemExit:
            found.append(f"the trainer rejects {command[2:]}")
        else:
            if volume_for(job, "Worker", str(trainer.data.data_dir)) is None:
                found.append(f"--data-dir {trainer.data.data_dir} is not mounted on the workers")

    # SSH: one port for horovodrun, the launcher's ssh config and the
    # workers' sshd; the ssh config's hosts are the hostfile's.
    ports = {"horovodrun -p": options.ssh_port}
    for kind in ("Launcher", "Worker"):
        ports[f"{kind} HVT_SSH_PORT"] = int(env(job, kind).get("HVT_SSH_PORT", 12345))
    worker = container(job, "Worker")
    ports["Worker containerPort"] = next(
        (p["containerPort"] for p in worker.get("ports", []) if p.get("name") == "ssh"), None)
    ports["Worker readinessProbe"] = worker.get("readinessProbe", {}).get(
        "tcpSocket", {}).get("port")
    if len(set(ports.values())) != 1:
        found.append(f"SSH ports disagree: {ports}")
    for kind in ("Launcher", "Worker"):
        patterns = env(job, kind).get("HVT_CLUSTER_HOSTS", "").split()
        unmatched = [h for h in operator_hostnames(job)
                     if not any(fnmatch.fnmatchcase(h, p) for p in patterns)]
        if unmatched:
            found.append(f"{kind} HVT_CLUSTER_HOSTS {patterns} does not match {unmatched}")
    if spec.get("launcherCreationPolicy") != "WaitForWorkersReady":
        found.append("the launcher may start before the workers' sshd listens")

    # Keys: the operator's per-job key, mounted at sshAuthMountPath, is the
    # entrypoint's keys directory, and the entrypoint reads the files the
    # operator mounts; that mount is away from the directory the entrypoint
    # writes its ssh files to.
    ssh_mount = spec.get("sshAuthMountPath", "/root/.ssh").rstrip("/")
    for kind in ("Launcher", "Worker"):
        keys_dir = env(job, kind).get("HVT_KEYS_DIR", "/etc/horovod/keys")
        if keys_dir != ssh_mount:
            found.append(f"{kind}: HVT_KEYS_DIR {keys_dir} is not the operator's key "
                         f"mount {ssh_mount}")
    missing = [f for f in OPERATOR_KEY_FILES if f'"$keys/{f}"' not in ENTRYPOINT
               and f'"$keys/{f.removesuffix(".pub")}.pub"' not in ENTRYPOINT]
    if missing:
        found.append(f"the entrypoint does not read the operator's {missing}")
    ssh_dir = re.search(r"^ssh_dir=(\S+)$", ENTRYPOINT, re.M).group(1)
    if ssh_mount == ssh_dir or ssh_dir.startswith(ssh_mount + "/"):
        found.append(f"sshAuthMountPath {ssh_mount} hides the entrypoint's SSH files")

    # /dev/shm: memory, not the container's 64 MiB default.
    shm = volume_for(job, "Worker", "/dev/shm")
    if shm is None or shm.get("emptyDir", {}).get("medium") != "Memory":
        found.append(f"/dev/shm on the workers is not a memory emptyDir: {shm}")

    # No API token, the runtime's default seccomp filter, the image's user.
    for kind in ("Launcher", "Worker"):
        pod = replica(job, kind)["template"]["spec"]
        if pod.get("automountServiceAccountToken") is not False:
            found.append(f"{kind}: the pods mount a service account token")
        context = pod.get("securityContext", {})
        if context.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            found.append(f"{kind}: no RuntimeDefault seccomp profile")
        if context.get("runAsUser") != image_uid():
            found.append(f"{kind}: runAsUser {context.get('runAsUser')} is not the image's "
                         f"user {image_uid()}")

    # Pod names: the operator's validation wants DNS-1035 labels.
    for host in operator_hostnames(job):
        label = host.split(".")[0]
        if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", label) or len(label) > 63:
            found.append(f"{label} is not a DNS-1035 label")
    return found


def edited(change):
    job = copy.deepcopy(MANIFEST)
    change(job)
    return job


# --- (a) the MPIJob against our v2beta1 schema --------------------------------

def test_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_manifest_is_a_valid_mpijob():
    assert schema_errors(MANIFEST) == []


def _set(path, value):
    def change(job):
        *parents, last = path
        node = job
        for key in parents:
            node = node[key]
        node[last] = value
    return change


def _rename(path, old, new):
    def change(job):
        node = job
        for key in path:
            node = node[key]
        node[new] = node.pop(old)
    return change


@pytest.mark.parametrize("change, where", [
    (_rename(["spec"], "slotsPerWorker", "slotsPerWorkers"), "spec"),
    (_rename(["spec", "mpiReplicaSpecs"], "Worker", "Workers"), "spec/mpiReplicaSpecs"),
    (_rename(["spec", "mpiReplicaSpecs"], "Launcher", "launcher"), "spec/mpiReplicaSpecs"),
    (_set(["spec", "runPolicy", "cleanPodPolicy"], "Finished"),
     "spec/runPolicy/cleanPodPolicy"),
    (_set(["spec", "mpiImplementation"], "OpenMPI4"), "spec/mpiImplementation"),
    (_set(["spec", "mpiReplicaSpecs", "Worker", "restartPolicy"], "Always"),
     "spec/mpiReplicaSpecs/Worker/restartPolicy"),
    (_set(["spec", "mpiReplicaSpecs", "Launcher", "replicas"], 2),
     "spec/mpiReplicaSpecs/Launcher/replicas"),
    (_set(["spec", "mpiReplicaSpecs", "Worker", "replicas"], 0),
     "spec/mpiReplicaSpecs/Worker/replicas"),
    (_set(["spec", "slotsPerWorker"], "2"), "spec/slotsPerWorker"),
    (_set(["apiVersion"], "kubeflow.org/v1"), "apiVersion"),
    (_set(["metadata", "name"], "Horovod_MNIST"), "metadata/name"),
    (_set(["spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers"], []),
     "spec/mpiReplicaSpecs/Launcher/template/spec/containers"),
])
def test_schema_rejects_a_broken_mpijob(change, where):
    errors = schema_errors(edited(change))
    assert errors, "the broken job passed the schema"
    assert any(e.startswith(f"{where}: ") for e in errors), errors


# --- (b) the pod templates against Kubernetes' schemas ------------------------

@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_pod_templates_are_valid_kubernetes(version):
    assert pod_template_errors(MANIFEST, version) == {}


@pytest.mark.parametrize("kind, change, words", [
    ("Worker", lambda c: c.update(volumeMount=c.pop("volumeMounts")), "volumeMount"),
    ("Launcher", lambda c: c.update(command=" ".join(c["command"])), "command: "),
    ("Worker", lambda c: c["readinessProbe"].update(tcpSockets=c["readinessProbe"].pop(
        "tcpSocket")), "tcpSockets"),
    ("Worker", lambda c: c["ports"][0].update(containerPort="ssh-port"), "ssh-port"),
])
def test_kubernetes_schema_rejects_a_broken_template(kind, change, words):
    job = copy.deepcopy(MANIFEST)
    change(container(job, kind))
    errors = pod_template_errors(job, K8S_VERSIONS[-1])
    assert list(errors) == [kind]
    assert words in errors[kind]


# --- (c) what the trainer, horovodrun, the image and the operator expect -------

def test_manifest_fits_the_trainer_the_image_and_the_operator():
    assert problems(MANIFEST) == []


def test_the_sizes_are_those_the_header_describes():
    assert replica(MANIFEST, "Worker")["replicas"] == 2
    assert MANIFEST["spec"]["slotsPerWorker"] == 2
    assert launch_options(horovodrun_argv(MANIFEST)).num_proc == 4


def _args(job, old, new):
    launcher = container(job, "Launcher")
    launcher["args"][launcher["args"].index(old)] = new


def _env(kind, name, value):
    def change(job):
        for e in container(job, kind)["env"]:
            if e["name"] == name:
                e["value"] = value
    return change


@pytest.mark.parametrize("change, words", [
    (_set(["spec", "slotsPerWorker"], 4), "slotsPerWorker 4 != nvidia.com/gpu"),
    (_set(["spec", "mpiReplicaSpecs", "Worker", "replicas"], 3), "-np 4 != 3 workers x 2"),
    (lambda job: _args(job, "4", "8"), "-np 8 != 2 workers x 2"),
    (lambda job: _args(job, "12345", "22"), "SSH ports disagree"),
    (_env("Worker", "HVT_SSH_PORT", "2222"), "SSH ports disagree"),
    (_env("Launcher", "HVT_CLUSTER_HOSTS", "worker-*"), "Launcher HVT_CLUSTER_HOSTS"),
    (lambda job: _args(job, "horovod_train/pytorch_mnist.py", "horovod_train/mnist_torch.py"),
     "horovod_train/mnist_torch.py is not in the repository"),
    (lambda job: _args(job, "--no-progress", "--no-progres-bar"), "the trainer rejects"),
    (lambda job: container(job, "Worker")["volumeMounts"].append(
        {"name": "data", "mountPath": "/workspace"}), "Worker: a volume at /workspace hides"),
    (lambda job: container(job, "Launcher").update(
        image="registry.example.com/horovod-train:latest"),
     "Launcher image registry.example.com/horovod-train:latest is not horovod-train-app"),
    (lambda job: _args(job, "/data", "/dataset"), "--data-dir /dataset is not mounted"),
    (lambda job: _args(job, "/etc/mpi/hostfile", "/etc/hostfile"), "--hostfile /etc/hostfile"),
    (lambda job: container(job, "Worker").pop("command"), "Worker does not start with"),
    (_set(["spec", "sshAuthMountPath"], "/run"), "sshAuthMountPath /run hides"),
    (_set(["spec", "launcherCreationPolicy"], "AtStartup"), "before the workers' sshd"),
    (_set(["spec", "mpiReplicaSpecs", "Worker", "template", "spec",
           "automountServiceAccountToken"], True), "Worker: the pods mount a service account"),
    (_set(["spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "securityContext"], {}),
     "Launcher: no RuntimeDefault seccomp profile"),
    (lambda job: volume_for(job, "Worker", "/dev/shm")["emptyDir"].pop("medium"),
     "/dev/shm on the workers is not a memory emptyDir"),
    (_env("Worker", "HVT_KEYS_DIR", "/etc/horovod/keys"),
     "Worker: HVT_KEYS_DIR /etc/horovod/keys is not the operator's key mount"),
    (_set(["spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "securityContext",
           "runAsUser"], 0), "Launcher: runAsUser 0 is not the image's user 1000"),
])
def test_problems_are_found_in_a_broken_manifest(change, words):
    found = problems(edited(change))
    assert any(words in p for p in found), found


def test_horovod_reads_the_command_so(tmp_path):
    """Horovod's own parser reads the launcher's command as launch_options
    does, and its hostfile reader gives the ranks -np asks for from a hostfile
    written as the operator writes it."""
    hostfile = tmp_path / "hostfile"
    slots = MANIFEST["spec"]["slotsPerWorker"]
    hostfile.write_text("".join(f"{h} slots={slots}\n" for h in operator_hostnames(MANIFEST)))
    probe = (
        "import json, sys\n"
        "from horovod.runner import launch\n"
        "from horovod.runner.common.util import hosts\n"
        "argv, hostfile = json.loads(sys.argv[1]), sys.argv[2]\n"
        "sys.argv = ['horovodrun'] + argv\n"
        "args = launch.parse_args()\n"
        "names, slots = hosts.parse_hosts_and_slots(hosts.parse_host_files(hostfile))\n"
        "print(json.dumps({'np': args.num_proc, 'hostfile': args.hostfile,\n"
        "                  'port': args.ssh_port, 'command': args.command,\n"
        "                  'hosts': names, 'slots': slots}))\n"
    )
    argv = horovodrun_argv(MANIFEST)
    run = subprocess.run([sys.executable, "-c", probe, json.dumps(argv), str(hostfile)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    read = json.loads(run.stdout.strip().splitlines()[-1])
    ours = launch_options(argv)
    assert (read["np"], read["hostfile"], read["port"], read["command"]) == (
        ours.num_proc, ours.hostfile, ours.ssh_port, ours.command)
    assert read["hosts"] == operator_hostnames(MANIFEST)
    assert sum(read["slots"].values()) == read["np"]


def test_ssh_config_the_entrypoint_writes_reaches_the_hostfile_names(tmp_path):
    """The entrypoint's ssh client config, written as it writes it with the
    launcher's HVT_CLUSTER_HOSTS and HVT_SSH_PORT and a key as the operator
    makes one (ECDSA P-521, PEM), gives ssh the workers' port, the image's
    user and the job's key for every name in the operator's hostfile, and
    the job's key as the host key each name must show (ssh -G prints the
    settings ssh would use, without connecting; ssh-keygen -F finds a name's
    known key)."""
    if shutil.which("ssh") is None:
        pytest.skip("needs the ssh client")
    assert "/opt/horovod-env/ssh_client.py" in ENTRYPOINT
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "",
                    "-f", str(tmp_path / "id_rsa")], check=True, timeout=60)
    assert "BEGIN EC PRIVATE KEY" in (tmp_path / "id_rsa").read_text()
    launcher = env(MANIFEST, "Launcher")
    known_hosts = tmp_path / "known_hosts"
    written = subprocess.run(
        [sys.executable, str(REPO / "docker" / "env" / "ssh_client.py"),
         "--port", launcher["HVT_SSH_PORT"], "--user", "hvt",
         "--identity", "/run/hvt-ssh/id_rsa", "--known-hosts", str(known_hosts),
         "--host-key", str(tmp_path / "id_rsa.pub"), *launcher["HVT_CLUSTER_HOSTS"].split()],
        capture_output=True, text=True, timeout=30)
    assert written.returncode == 0, written.stderr
    config = tmp_path / "config"
    config.write_text(written.stdout)
    job_key = (tmp_path / "id_rsa.pub").read_text().split()[1]
    for host in operator_hostnames(MANIFEST) + operator_hostnames(MANIFEST, "training"):
        run = subprocess.run(["ssh", "-G", "-F", str(config), host],
                             capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, run.stderr
        settings = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
        assert settings["port"] == launcher["HVT_SSH_PORT"] == "12345"
        assert settings["user"] == "hvt"
        assert settings["identityfile"] == "/run/hvt-ssh/id_rsa"
        assert settings["stricthostkeychecking"] == "true"
        known = subprocess.run(["ssh-keygen", "-F", f"[{host}]:12345", "-f", str(known_hosts)],
                               capture_output=True, text=True, timeout=30)
        assert job_key in known.stdout, (host, known.stdout)


def pods(job):
    return {kind: replica(job, kind)["template"]["spec"] for kind in ("Launcher", "Worker")}


def test_the_pods_meet_the_restricted_pod_security_standard():
    assert {kind: pod_security.restricted(pod) for kind, pod in pods(MANIFEST).items()} == {
        "Launcher": [], "Worker": []}


@pytest.mark.parametrize("change, words", [
    (_set(["spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers", 0,
           "securityContext", "allowPrivilegeEscalation"], True),
     "worker: allowPrivilegeEscalation is not false"),
    (lambda job: container(job, "Launcher")["securityContext"].pop("capabilities"),
     "launcher: capabilities do not drop ALL"),
    (lambda job: replica(job, "Worker")["template"]["spec"]["securityContext"].pop(
        "runAsNonRoot"), "worker: runAsNonRoot is not true"),
    (lambda job: replica(job, "Worker")["template"]["spec"]["volumes"].append(
        {"name": "nodes", "hostPath": {"path": "/"}}), "hostPath volume nodes"),
    (lambda job: container(job, "Worker")["securityContext"].update(privileged=True),
     "worker: privileged"),
])
def test_the_pod_security_check_finds_each_breach(change, words):
    found = [line for pod in pods(edited(change)).values()
             for line in pod_security.restricted(pod)]
    assert any(words in line for line in found), found


def test_the_network_policy_admits_the_jobs_pods_alone():
    """docker/k8s/networkpolicy.yaml: valid, selecting the launcher's and the
    workers' pods by the label both carry, admitting traffic from those pods
    and no others."""
    policy = yaml.safe_load((MANIFEST_FILE.parent / "networkpolicy.yaml").read_text())
    kubernetes_validate.validate(policy, K8S_VERSIONS[-1], strict=True)
    selector = policy["spec"]["podSelector"]["matchLabels"]
    for kind in ("Launcher", "Worker"):
        labels = MANIFEST["spec"]["mpiReplicaSpecs"][kind]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), (kind, labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]
    assert "kubectl apply -f docker/k8s/networkpolicy.yaml" in MANIFEST_FILE.read_text()


# --- (d) the InfiniBand/RoCE variant: kubectl kustomize docker/k8s -------------

RDMA_RESOURCE = "rdma/rdma_shared_device_a"  # docker/k8s/rdma/worker-rdma.yaml's


@pytest.fixture(scope="module")
def rdma_job():
    """`kubectl kustomize docker/k8s`, run for real (kustomize is built into
    kubectl; no cluster needed): what `kubectl apply -k docker/k8s` applies."""
    if shutil.which("kubectl") is None:
        pytest.skip("needs kubectl, whose built-in kustomize renders the RDMA variant")
    run = subprocess.run(["kubectl", "kustomize", str(MANIFEST_FILE.parent)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    documents = list(yaml.safe_load_all(run.stdout))
    assert sorted(d.get("kind") for d in documents) == ["MPIJob", "NetworkPolicy"], documents
    return next(d for d in documents if d["kind"] == "MPIJob")


def without_rdma(job):
    """The job less what the RDMA component changes: the worker container's
    security context (root, IPC_LOCK) back to the plain job's, its RDMA
    device, and the launcher's ssh user (root, whom the workers' sshd lets
    in)."""
    job = copy.deepcopy(job)
    worker = container(job, "Worker")
    if worker.get("securityContext", {}).get("capabilities", {}).get("add") == ["IPC_LOCK"]:
        worker["securityContext"] = container(MANIFEST, "Worker")["securityContext"]
    worker["resources"]["limits"].pop(RDMA_RESOURCE, None)
    launcher = container(job, "Launcher")
    launcher["env"] = [e for e in launcher["env"] if e != {"name": "HVT_SSH_USER", "value": "root"}]
    return job


def test_rdma_variant_is_a_valid_mpijob(rdma_job):
    assert rdma_job["kind"] == "MPIJob"
    assert schema_errors(rdma_job) == []
    for version in K8S_VERSIONS:
        assert pod_template_errors(rdma_job, version) == {}
    assert problems(rdma_job) == []


def test_rdma_variant_gives_the_workers_ipc_lock_and_an_rdma_device(rdma_job):
    """IPC_LOCK reaches root's processes alone: the workers run as root, and
    the launcher (no rank, no RDMA) logs in to them as root. Only the
    workers leave the restricted standard, for the capability and root."""
    worker = container(rdma_job, "Worker")
    assert worker["securityContext"] == {"runAsUser": 0, "runAsNonRoot": False,
                                         "capabilities": {"add": ["IPC_LOCK"]}}
    assert worker["resources"]["limits"][RDMA_RESOURCE] == 1
    assert {"name": "HVT_SSH_USER", "value": "root"} in container(rdma_job, "Launcher")["env"]
    found = {kind: pod_security.restricted(pod) for kind, pod in pods(rdma_job).items()}
    assert found["Launcher"] == []
    assert "worker: adds capabilities ['IPC_LOCK']" in found["Worker"]
    assert "worker: runAsNonRoot is not true" in found["Worker"]


def test_rdma_variant_is_the_plain_job_and_that_only(rdma_job):
    assert without_rdma(rdma_job) == MANIFEST
    # The plain path (kubectl apply -f docker/k8s/mpijob.yaml) has none of it.
    assert without_rdma(MANIFEST) == MANIFEST
    assert "capabilities" not in json.dumps(container(MANIFEST, "Worker")).replace(
        '"capabilities": {"drop": ["ALL"]}', "")

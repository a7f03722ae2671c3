"""The training image's recipe, read without building it: the Dockerfile's
defaults, a build context that is docker/ alone (`docker build docker/`),
and the order of its layers (the Horovod recipe after PyTorch's layer). Its
lint is test_image_run.py's; the built images, run as hosts, are
test_image_cluster.py's."""


import re

from conftest import (
    REPO,
)

CONTEXT = REPO / "docker"

DOCKERFILE = CONTEXT / "Dockerfile"
ENV_DIR = CONTEXT / "env"


def instructions(path=DOCKERFILE) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction, continuation lines joined,
    comments left out."""
    found, pending = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not (line.strip() or pending):
            continue
        pending += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            keyword, _, rest = pending.strip().partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
            pending = ""
    return found


def copy_sources(arguments: str) -> list[str]:
    """A COPY's sources from the build context (none for --from=)."""
    words = arguments.split()
    if any(w.startswith("--from=") for w in words):
        return []
    return [w for w in words[:-1] if not w.startswith("--")]


def recipe_copies(steps) -> dict[str, str]:
    """Each entry of docker/env/ that these steps copy, and where to (a file
    by its name, a folder to the folder of its name, env/ to its entries)."""
    copied = {}
    for keyword, arguments in steps:
        if keyword != "COPY":
            continue
        target = arguments.split()[-1]
        for source in copy_sources(arguments):
            if not source.startswith("env/"):
                continue
            name = source.removeprefix("env/").rstrip("/")
            if not name:  # the folder's contents
                copied |= {e.name: f"{target.rstrip('/')}/{e.name}" for e in ENV_DIR.iterdir()}
            elif source.endswith("/"):
                copied[name] = target.rstrip("/")
            else:
                copied[name] = f"{target.rstrip('/')}/{name}" if target.endswith("/") else target
    return copied


def framework_layer(steps) -> int:
    """The index of the RUN that installs everything but Horovod."""
    runs = [i for i, (keyword, arguments) in enumerate(steps)
            if keyword == "RUN" and "--no-horovod" in arguments]
    assert len(runs) == 1, runs
    return runs[0]


def test_defaults_build_the_gpu_image_on_debian():
    text = DOCKERFILE.read_text()
    defaults = dict(re.findall(r"^ARG (\w+)=(\S+)", text, flags=re.M))
    for image in re.findall(r"^FROM (\S+)", text, flags=re.M):
        for name in re.findall(r"\$\{(\w+)\}", image):
            assert defaults.get(name), f"FROM {image}: no default for {name}"
    assert defaults["BASE_IMAGE"] == "debian:bookworm"
    assert defaults["DEVICE"] == "gpu"
    assert defaults["GCC_VERSION"] == "12"
    assert defaults["CUDA_ARCHS"] == "torch"


def test_everything_the_dockerfile_copies_is_in_docker_dir():
    """`docker build docker/` sends docker/ alone: every COPY source (but
    those from a stage) must lie inside it."""
    sources = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources += line.split()[1:-1]
    assert sources
    for source in sources:
        assert (CONTEXT / source).exists(), source
        assert (CONTEXT / source).resolve().is_relative_to(CONTEXT)


def test_horovod_recipe_is_copied_after_the_framework_layer():
    """Editing a patch or the Horovod recipe rebuilds the Horovod layer and
    those after it, not PyTorch's (~6 GB): nothing of theirs is copied
    before the RUN of setup.sh --no-horovod, and all of it is copied before
    the RUN that builds Horovod."""
    steps = instructions()
    framework = framework_layer(steps)
    horovod_recipe = {"patches", "build_horovod.sh", "build_horovod.py"}
    early = horovod_recipe & recipe_copies(steps[:framework]).keys()
    assert not early, f"copied before PyTorch's layer: {sorted(early)}"
    builds = [i for i, (keyword, arguments) in enumerate(steps)
              if keyword == "RUN" and "build_horovod.sh" in arguments]
    assert builds and builds[0] > framework
    missing = horovod_recipe - recipe_copies(steps[framework:builds[0]]).keys()
    assert not missing, f"not copied before the Horovod layer: {sorted(missing)}"

def test_framework_layer_has_what_setup_sh_reads_before_horovod():
    """setup.sh --no-horovod reads the files it names as $here/... before it
    stops for Horovod: each is copied before that layer's RUN."""
    setup = (ENV_DIR / "setup.sh").read_text()
    before_horovod = setup.split("if [[ $horovod -eq 0 ]]")[0]
    read = {m.split("/")[0] for m in re.findall(r'\$here/([\w.\-/]+)', before_horovod)}
    assert {"requirements", "constraints.txt"} <= read, read
    steps = instructions()
    copied = recipe_copies(steps[:framework_layer(steps)])
    assert read | {"setup.sh"} <= copied.keys(), (read | {"setup.sh"}) - copied.keys()


def test_every_recipe_file_is_in_the_image():
    """The recipe's files all land under /opt/horovod-env, as one COPY of
    env/ put them: each entry of docker/env/ is copied (a file there by its
    name, a folder to the folder of its name)."""
    steps = instructions()
    final_stage = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    copied = recipe_copies(steps[final_stage:])
    for entry in sorted(ENV_DIR.iterdir()):
        assert copied.get(entry.name) == f"/opt/horovod-env/{entry.name}", \
            f"docker/env/{entry.name} is not copied to /opt/horovod-env/{entry.name}"


def test_pythonpath_is_the_checkout():
    """`python benchmarks/NAME.py` in the image imports benchmarks and
    horovod_train from the checkout: PYTHONPATH is the working directory,
    where the checkout is mounted and where app.Dockerfile copies it."""
    steps = instructions()
    env = " ".join(arguments for keyword, arguments in steps if keyword == "ENV")
    workdir = [arguments for keyword, arguments in steps if keyword == "WORKDIR"][-1]
    assert re.search(rf"(^| )PYTHONPATH={re.escape(workdir)}( |$)", env), env
    app = instructions(CONTEXT / "app.Dockerfile")
    assert ("COPY", f". {workdir}") in app

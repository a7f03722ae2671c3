# syntax=docker/dockerfile:1
# The training image with the code in it: the environment image
# (docker/Dockerfile) plus this checkout at /workspace, installed as a
# package too. Its build context is the repository root, whose .dockerignore
# lets in the code alone (no keys, data, venvs or results):
#
#   docker build -t horovod-train docker/
#   docker build -f docker/app.Dockerfile -t horovod-train-app .
#
# For clusters without a shared filesystem (Kubernetes pods, nodes without
# one): nothing but data and outputs needs mounting. The environment image
# with the checkout mounted at /workspace stays the way to develop: editing
# a trainer needs no rebuild there.
ARG BASE_IMAGE=horovod-train
FROM ${BASE_IMAGE}
# The environment image's user (docker/Dockerfile's HVT_UID); root only to
# install, the code stays root's and read-only to the user.
ARG HVT_UID=1000
USER 0:0
COPY . /workspace
# The package from that copy (its console scripts, `python -m
# horovod_train...`), without dependencies: the environment has them all,
# pinned. pip builds in the tree; its build files are removed. runs/, the
# trainers' default --log-dir, is the user's.
RUN /opt/venv/bin/python -m pip install --quiet --no-deps --no-build-isolation \
        --no-cache-dir /workspace \
    && rm -rf /workspace/build /workspace/*.egg-info \
    && /opt/venv/bin/python -c "import horovod_train.pytorch_mnist" \
    && install -d -o "${HVT_UID}" -g "${HVT_UID}" /workspace/runs
USER ${HVT_UID}:${HVT_UID}

# The Ray image: the head, the GPU workers and the CPU workers all run it (compose's ray-* services, the
# RayCluster in deploy/k8s). It holds the whole project with its pinned dependencies, torch's CUDA build
# included. Build from the repository root:
#   docker build -f deploy/worker.Dockerfile -t smartune/worker:0.1.0 .
#
# CUDA: the torch wheel brings its own CUDA libraries; the host needs an NVIDIA driver recent enough for them
# (and the NVIDIA container toolkit). Pick TORCH_INDEX_URL among the CUDA builds PyTorch publishes for the
# pinned torch (https://pytorch.org/get-started/locally/) and keep the base image's CUDA at the same minor.
# (`nvidia/cuda:*-base-*` would save about 2 GB, as the wheel ships the libraries the runtime image adds.)
#
# The CPU build (the compose stack test; hosts without GPUs): a Debian or Ubuntu base and torch's CPU wheel
# put in deploy/wheels/ (git-ignored; tests/support/docker_engine.py copies it from pip's find-links), e.g.
#   docker build -f deploy/worker.Dockerfile --build-arg BASE_IMAGE=debian:bookworm \
#     --build-arg TORCH_REQUIREMENT=torch==2.13.0+cpu --build-arg TORCH_INDEX_URL=https://pypi.org/simple .
# Nothing else differs between the two builds.

ARG BASE_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
FROM ${BASE_IMAGE}

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG TORCH_REQUIREMENT=torch==2.13.0
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1

# Ubuntu 24.04's Python is 3.12 (requires-python allows it). wget: KubeRay's default probes call it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates wget \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv \
    && pip install "pip>=25.1"

# torch alone from the PyTorch index (the CUDA build), or a wheel of deploy/wheels (bound for this step
# only: no layer keeps it); everything else from PyPI. The project's pin `torch==2.13.0` is satisfied by
# the installed `2.13.0+cuXXX` (or `+cpu`), so the next step keeps it.
# hadolint cannot see through TORCH_REQUIREMENT, which is a pin (torch==2.13.0, or torch==2.13.0+cpu).
# hadolint ignore=DL3013
RUN --mount=type=bind,source=deploy/wheels,target=/tmp/wheels \
    pip install "$TORCH_REQUIREMENT" --index-url "$TORCH_INDEX_URL" --find-links /tmp/wheels

WORKDIR /src
# The dependencies in their own layer (rebuilt only when pyproject.toml or the lock changes), at the
# versions of requirements.lock (`make lock`), then the project.
COPY pyproject.toml requirements.lock ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['s3']))" \
        > /tmp/requirements.txt \
    && pip install --constraint requirements.lock --requirement /tmp/requirements.txt \
    && rm /tmp/requirements.txt
# The README (the package's long description) with the sources: an edit of it rebuilds no dependency layer.
COPY README.md ./
COPY smart_core ./smart_core
COPY worker ./worker
COPY service ./service
COPY cli ./cli
COPY smartune ./smartune
COPY bench ./bench
RUN pip install --no-deps . \
    && python -I -c "import cli.main, torch, ray, worker.tune.sweep; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

RUN groupadd --gid 10001 smartune \
    && useradd --uid 10001 --gid smartune --create-home --home-dir /home/smartune --shell /bin/bash smartune \
    && install --directory --owner=smartune --group=smartune /var/lib/smartune
# Offline by default: a job turns the hub on only when the deployment allows hub ids (SMARTUNE_HUB_ALLOW).
ENV SMARTUNE_DATA_DIR=/var/lib/smartune \
    HF_HOME=/var/lib/smartune/hf \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    RAY_USAGE_STATS_ENABLED=0
USER 10001:10001
WORKDIR /home/smartune
# Joins a head as a worker; the head's command is `ray start --head ...` (docker-compose.yml).
CMD ["ray", "start", "--address=ray-head:6379", "--block"]

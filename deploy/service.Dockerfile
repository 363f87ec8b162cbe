# The control plane's image: FastAPI, SQLAlchemy, the Ray and MLflow clients. No torch, no transformers
# (the service never imports them; tests/test_boundaries.py). Build from the repository root:
#   docker build -f deploy/service.Dockerfile -t smartune/service:0.1.0 .
# About 440 MB of Python packages, most of it Ray (docs/deployment.md, "Image sizes").
# BASE_IMAGE: a Debian bookworm with Python 3.11 as `python` (the compose stack test builds on one made with
# debootstrap where no registry is reachable: tests/support/docker_engine.py).
# Runs as a numeric non-root user, on a read-only root file system (compose's read_only, the Deployment's
# readOnlyRootFilesystem): it writes to its data dir (a volume) and /tmp (a tmpfs) only.

ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# `pip install --group` (PEP 735 dependency groups) needs pip 25.1 or newer.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install "pip>=25.1"
WORKDIR /src
# The runtime dependencies first, in their own layer (rebuilt only when pyproject.toml or the lock
# changes), at the versions of requirements.lock (`make lock`).
COPY pyproject.toml requirements.lock ./
RUN /opt/venv/bin/pip install --constraint requirements.lock --group service
# Then the project itself, without its dependencies (which would pull torch and transformers). The README
# (the package's long description) comes with the sources: an edit of it rebuilds no dependency layer.
COPY README.md ./
COPY smart_core ./smart_core
COPY worker ./worker
COPY service ./service
COPY cli ./cli
COPY smartune ./smartune
COPY bench ./bench
# -I: the installed package, not /src (the working directory), is what the check imports.
RUN /opt/venv/bin/pip install --no-deps . \
    && /opt/venv/bin/python -I -c "import cli.main, service.main, sys; assert 'torch' not in sys.modules"

FROM ${BASE_IMAGE}
LABEL io.smartune.read-only-root-fs="true"
# A fixed numeric user, so Kubernetes' runAsNonRoot can verify it.
RUN groupadd --system --gid 10001 smartune \
    && useradd --system --uid 10001 --gid smartune --create-home --home-dir /home/smartune smartune \
    && install --directory --owner=smartune --group=smartune --mode=0750 /var/lib/smartune
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SMARTUNE_HOST=0.0.0.0 \
    SMARTUNE_PORT=8000 \
    SMARTUNE_DATA_DIR=/var/lib/smartune \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
USER 10001:10001
WORKDIR /var/lib/smartune
EXPOSE 8000
# Liveness only (no database, no Ray): readiness is /readyz, for orchestrators that route traffic.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SMARTUNE_PORT', '8000'), timeout=4)"]
CMD ["smartune", "serve"]

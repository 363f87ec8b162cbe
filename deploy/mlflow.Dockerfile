# The MLflow tracking server of the team stack: PostgreSQL backend, S3 (MinIO) artifacts served through the
# server (--serve-artifacts), basic auth. Build from the repository root:
#   docker build -f deploy/mlflow.Dockerfile -t smartune/mlflow:0.1.0 .

# BASE_IMAGE: a Debian bookworm with Python 3.11 as `python` (tests/support/docker_engine.py builds one with
# debootstrap for the compose stack test). Runs as a numeric non-root user on a read-only root file system
# (compose's read_only, the Deployment's readOnlyRootFilesystem): start.sh writes its ini to /tmp (a tmpfs).

ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
LABEL io.smartune.read-only-root-fs="true"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
# mlflow at the version the project pins (pyproject.toml); `auth` brings the basic-auth app's Flask-WTF. In a
# venv: Debian's own Python refuses system-wide pip installs (PEP 668).
RUN python -m venv /opt/venv \
    && pip install "mlflow[auth]==3.17.2" "psycopg2-binary==2.9.13" "boto3==1.44.8"
RUN groupadd --system --gid 10001 mlflow \
    && useradd --system --uid 10001 --gid mlflow --create-home --home-dir /home/mlflow mlflow
COPY --chmod=0755 deploy/mlflow/start.sh /usr/local/bin/mlflow-start
USER 10001:10001
WORKDIR /home/mlflow
EXPOSE 5000
# /health needs neither a login nor an allowed Host header.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=5 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5000/health', timeout=4)"]
ENTRYPOINT ["mlflow-start"]
CMD ["--serve-artifacts", "--app-name", "basic-auth", "--host", "0.0.0.0", "--port", "5000"]

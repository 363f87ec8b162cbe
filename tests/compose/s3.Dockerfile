# The S3 endpoint of the compose stack test: moto's server, from the package index, the stand-in for MinIO
# the native team-stack test uses too (tests/support/teamstack.py). MinIO itself is neither in Debian nor
# on the index, and no image registry is reachable here (tests/compose/override.yml). In-memory: its objects
# live as long as its container.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv \
    && pip install "moto[server]==5.2.5" "boto3==1.44.8"
RUN groupadd --system --gid 10001 s3 \
    && useradd --system --uid 10001 --gid s3 --no-create-home s3
USER 10001:10001
EXPOSE 9000
CMD ["moto_server", "--host", "0.0.0.0", "--port", "9000"]

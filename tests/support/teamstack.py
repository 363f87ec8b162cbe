"""The team stack of docker-compose.yml, run natively as processes (no Docker engine needed): an
S3-compatible object store (moto's server, standing in for MinIO), the MLflow tracking server with its
PostgreSQL backend, proxied S3 artifacts and the basic-auth app (the image-environment and MLflow-team tests use them). The
PostgreSQL server and the Ray head come from tests/support/cluster.py.

Each process runs in its own session and is stopped by its process group, never by name."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.cluster import REPO, ProcessDied, base_env, free_port, stop_group, wait_for


@dataclass
class ObjectStore:
    """An S3 endpoint with one bucket; `env` is what a client needs (pyarrow and boto3 read it)."""

    endpoint: str
    bucket: str
    server: Any  # moto.server.ThreadedMotoServer

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "smartune-test",
            "AWS_SECRET_ACCESS_KEY": "smartune-test-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "MLFLOW_S3_ENDPOINT_URL": self.endpoint,
        }

    def keys(self, prefix: str = "") -> list[str]:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, **_credentials(self.env))
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def stop(self) -> None:
        self.server.stop()


def _credentials(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_DEFAULT_REGION"],
    }


def start_object_store(bucket: str = "smartune") -> ObjectStore:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    store = ObjectStore(f"http://{host}:{port}", bucket, server)
    boto3.client("s3", endpoint_url=store.endpoint, **_credentials(store.env)).create_bucket(Bucket=bucket)
    return store


@dataclass
class MlflowServer:
    url: str
    process: subprocess.Popen[Any]
    folder: Path

    def stop(self) -> None:
        stop_group(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)

    def log(self) -> str:
        return (self.folder / "mlflow.log").read_text()[-3000:]


def start_mlflow_server(
    *, backend_uri: str, auth_db_uri: str, artifacts: str, env: dict[str, str], username: str, password: str
) -> MlflowServer:
    """`mlflow server` through the MLflow image's entry script (deploy/mlflow/start.sh, which writes the
    basic-auth configuration from the environment): PostgreSQL backend, artifacts proxied to S3, the
    basic-auth app whose admin is `username`/`password`."""
    folder = Path(tempfile.mkdtemp(prefix="st-mlflow-"))
    port = free_port()
    server_env = (
        base_env()
        | env
        | {
            "TMPDIR": str(folder),
            "MLFLOW_BACKEND_STORE_URI": backend_uri,
            "MLFLOW_AUTH_DATABASE_URI": auth_db_uri,
            "MLFLOW_AUTH_ADMIN_USERNAME": username,
            "MLFLOW_AUTH_ADMIN_PASSWORD": password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": "smartune-test-flask-secret",
        }
    )
    cmd = ["sh", str(REPO / "deploy" / "mlflow" / "start.sh"), "--artifacts-destination", artifacts]
    cmd += ["--serve-artifacts", "--app-name", "basic-auth", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--workers", "1"]
    log = (folder / "mlflow.log").open("w")
    process = subprocess.Popen(
        cmd, cwd=folder, env=server_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise ProcessDied(f"mlflow server exited:\n{(folder / 'mlflow.log').read_text()[-3000:]}")
        return httpx.get(f"{url}/health", timeout=2).status_code == 200

    wait_for(up, 180, "mlflow server")
    return MlflowServer(url, process, folder)

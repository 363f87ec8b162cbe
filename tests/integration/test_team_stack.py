"""The team stack of docker-compose.yml, natively: a throwaway PostgreSQL (job store and MLflow's backend,
separate databases), an S3 server (moto, standing in for MinIO), `mlflow server` with the PostgreSQL
backend, artifacts proxied to S3 and the basic-auth app, a Ray head with token auth and no GPU, a second
Ray node with a logical GPU, and the API configured only through the environment variables that the
compose file gives the `api` service (plus the harness's few, named below), its migrations run first by
`smartune migrate --wait` as the compose prestart step does.

A tiny job submitted over HTTP succeeds with its trial on the GPU node, logging in to MLflow as its team's
user (the nodes hold no MLflow login); its runs, metrics, checkpoint and registered model are found in the
MLflow server through the MLflow client; its Tune checkpoints are in S3; another team's MLflow user, made
when the team was, gets 403 on them. Then (slow) the Ray head dies mid-job, a new one comes up, and the
job resumes from the S3 checkpoints."""

from __future__ import annotations

import hmac
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.integration.client import FINAL, Api, tiny_spec
from tests.support.cluster import (
    REPO,
    Postgres,
    RayHead,
    Server,
    base_env,
    free_port,
    start_ray_head,
    wait_for,
)
from tests.support.teamstack import (
    MlflowServer,
    ObjectStore,
    RayWorkerNode,
    start_mlflow_server,
    start_object_store,
    start_ray_worker,
)

COMPOSE = REPO / "docker-compose.yml"
MLFLOW_USER, MLFLOW_PASSWORD = "admin", "stack-mlflow-secret"
MLFLOW_TEAM_SECRET = "stack-mlflow-team-secret-0123456789abcdef"  # derives each team's MLflow password
METRICS_TOKEN = "stack-metrics-token-0123456789"
# Only what a native run needs beyond the compose file's variables: the venv's python for the Ray job's
# entrypoint (the images have one python), the GLUE copy (mounted in the compose stack), a faster engine.
HARNESS_ONLY = {"SMARTUNE_ENTRYPOINT_PYTHON", "SMARTUNE_GLUE_DIR", "SMARTUNE_SCHEDULER_INTERVAL_S",
                "SMARTUNE_CAPACITY_TTL_S", "PYTHONPATH", "PATH", "HOME"}  # fmt: skip


@dataclass
class Stack:
    postgres: Postgres
    store: ObjectStore
    mlflow: MlflowServer
    node_env: dict[str, str]
    head: RayHead
    worker: RayWorkerNode
    server: Server
    started: list[Any]  # every process the fixture stops at the end, restarted ones included

    def restart_ray(self) -> None:
        """A dead head comes back at the same address; the GPU node rejoins it."""
        self.head.crash()
        self.worker.stop()
        old, self.head = (
            self.head,
            start_ray_head(num_cpus=1, num_gpus=0, ports=self.head.ports, env=self.node_env),
        )
        old.stop()
        self.worker = start_ray_worker(_gcs(self.head), num_cpus=2, num_gpus=1, env=self.node_env)
        self.started += [self.head, self.worker]

    def revive_worker(self) -> None:
        """Starts the GPU node again if it exited, as the compose file's `restart: unless-stopped` does.
        Once, a GPU node that had just joined the restarted head lost its raylet (exit code 1) 14 s later,
        and the resumed job then waited for a GPU that never came back."""
        if self.worker.process.poll() is not None:
            self.worker = start_ray_worker(_gcs(self.head), num_cpus=2, num_gpus=1, env=self.node_env)
            self.started.append(self.worker)


def _gcs(head: RayHead) -> str:
    return f"127.0.0.1:{head.ports['--port']}"


def _compose_api_env() -> dict[str, Any]:
    environment = yaml.safe_load(COMPOSE.read_text())["services"]["api"]["environment"]
    if isinstance(environment, list):  # KEY=VALUE items
        return dict(item.split("=", 1) for item in environment)
    return dict(environment)


def _api_env(
    stack_urls: dict[str, str], data_dir: Path, port: int, store_env: dict[str, str]
) -> dict[str, str]:
    """The compose file's `api` variables, each given its native value; a variable the compose file adds
    without a native value here fails the test (KeyError), so the two cannot drift apart."""
    native = {
        "SMARTUNE_ENV": "production",
        "SMARTUNE_HOST": "127.0.0.1",
        "SMARTUNE_PORT": str(port),
        "SMARTUNE_DATA_DIR": str(data_dir),
        "SMARTUNE_BOOTSTRAP_KEY_FILE": str(data_dir / "admin-key"),
        "SMARTUNE_MIGRATE_ON_START": "false",
        "DATABASE_URL": stack_urls["database"],
        "RAY_ADDRESS": stack_urls["ray"],
        "RAY_AUTH_TOKEN": (Path.home() / ".ray" / "auth_token").read_text().strip(),
        "MLFLOW_TRACKING_URI": stack_urls["mlflow"],
        "MLFLOW_TRACKING_USERNAME": MLFLOW_USER,
        "MLFLOW_TRACKING_PASSWORD": MLFLOW_PASSWORD,
        "SMARTUNE_MLFLOW_TEAM_SECRET": MLFLOW_TEAM_SECRET,
        "SMARTUNE_STORAGE_PATH": "s3://smartune/ray_results",
        "SMARTUNE_MLFLOW_UI_URL": stack_urls["mlflow"],
        "SMARTUNE_MLFLOW_UI_PROTECTED": "true",
        "SMARTUNE_DATA_ROOTS": str(data_dir.parent / "data-roots"),
        "SMARTUNE_HUB_ALLOW": "",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "SMARTUNE_METRICS_TOKEN": METRICS_TOKEN,
        "SMARTUNE_DASHBOARD_SECRET": "stack-dashboard-secret-0123456789abcdef",
        "SMARTUNE_LOG_FORMAT": "json",
        "SMARTUNE_DATASET_STORE": "s3://smartune/datasets",  # uploads, in the stack's S3 (moto for MinIO)
        **{k: v for k, v in store_env.items() if k.startswith("AWS_")},
    }
    return {name: native[name] for name in _compose_api_env()}


@pytest.fixture(scope="module")
def stack(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory, glue_dir: Path) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("team-stack")
    suffix = os.urandom(3).hex()
    job_db = postgres.create_database(f"smartune_{suffix}").replace("postgres@", "postgres:stack-db-secret@")
    # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; the stack installs psycopg2.
    mlflow_db = postgres.create_database(f"mlflow_{suffix}").replace(
        "postgresql://", "postgresql+psycopg2://"
    )
    auth_db = postgres.create_database(f"mlflow_auth_{suffix}").replace(
        "postgresql://", "postgresql+psycopg2://"
    )
    store = start_object_store("smartune")
    started: list[Any] = [store]
    try:
        mlflow = start_mlflow_server(backend_uri=mlflow_db, auth_db_uri=auth_db, artifacts="s3://smartune/mlflow",
                                     env=store.env, username=MLFLOW_USER, password=MLFLOW_PASSWORD)  # fmt: skip
        started.append(mlflow)
        # No MLflow login on the nodes (the compose file gives them none): each job brings its team's.
        node_env = store.env | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        head = start_ray_head(num_cpus=1, num_gpus=0, env=node_env)
        started.append(head)
        worker = start_ray_worker(_gcs(head), num_cpus=2, num_gpus=1, env=node_env)
        started.append(worker)
        port = free_port()
        data_dir = tmp / "data"
        urls = {"database": job_db, "ray": head.address, "mlflow": mlflow.url}
        env = {k: v for k, v in base_env().items() if not k.startswith(("SMARTUNE_", "MLFLOW_", "AWS_"))}
        env |= _api_env(urls, data_dir, port, store.env) | {
            "SMARTUNE_ENTRYPOINT_PYTHON": sys.executable,
            "SMARTUNE_GLUE_DIR": str(glue_dir),
            "SMARTUNE_SCHEDULER_INTERVAL_S": "0.5",
            "SMARTUNE_CAPACITY_TTL_S": "1",
        }
        prestart = [sys.executable, "-m", "cli.main", "migrate", "--wait", "30"]
        done = subprocess.run(prestart, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        server = Server(url=f"http://127.0.0.1:{port}", data_dir=data_dir, env=env, port=port).start()
        started.append(server)
        yield Stack(postgres, store, mlflow, node_env, head, worker, server, started)
    finally:
        for part in reversed(started):
            part.stop()


@pytest.fixture
def mlflow_client(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An MLflow client of the stack's server, logged in as its admin (who reads every team's runs)."""

    def client(stack: Stack) -> Any:
        from mlflow import MlflowClient

        for name, value in stack.node_env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", MLFLOW_USER)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", MLFLOW_PASSWORD)
        return MlflowClient(stack.mlflow.url)

    return client


def _team(stack: Stack, name: str) -> Api:
    admin = Api(stack.server, stack.server.admin_key())
    return Api(stack.server, admin.team_key(name, gpu_quota=1))


def _gpu_node_joined(api: Api) -> None:
    def joined() -> bool:
        return api("GET", "/api/v1/pool").json()["capacity"] == {"cpus": 3.0, "gpus": 1.0}

    wait_for(joined, 120, "the GPU node in the pool")


def test_the_compose_api_environment_is_enough_for_a_job(
    stack: Stack, mlflow_client: Any, tmp_path: Path
) -> None:
    assert httpx.get(f"{stack.server.url}/readyz", timeout=10).json()["status"] == "ok"
    scrape = httpx.get(f"{stack.server.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert scrape.status_code == 200 and "smartune_up 1.0" in scrape.text
    login = httpx.get(f"{stack.server.url}/ui/login", timeout=10)  # the compose secret turns the dashboard on
    assert login.status_code == 200 and "csrf" in login.text.lower()
    api = _team(stack, "stack")
    _gpu_node_joined(api)
    spec = tiny_spec(resources={"cpus": 1, "gpus": 1}, search_space={"axes": {}})
    job = api.wait(api.submit(spec), lambda j: j["state"] in FINAL, timeout=300)
    assert job["state"] == "SUCCEEDED", job["message"]
    (trial,) = job["trials"]

    client = mlflow_client(stack)
    run = client.get_run(trial["mlflow_run_id"])
    assert run.data.tags["smartune.job_id"] == job["id"]
    assert run.data.tags["smartune.node_id"] == _gpu_node_id(stack)  # the GPU node trained it
    assert json.loads(run.data.tags["smartune.resources"])["GPU"] == 1.0
    assert run.data.metrics["eval_accuracy"] == trial["best_score"]
    # The best checkpoint went through the MLflow server into S3, and comes back the same way.
    checkpoint = Path(client.download_artifacts(run.info.run_id, "best_checkpoint", str(tmp_path)))
    assert (checkpoint / "config.json").is_file() and list(checkpoint.glob("*.safetensors"))
    assert any("best_checkpoint" in key for key in stack.store.keys("mlflow/")), "no MLflow artifact in S3"
    assert any("/checkpoint_" in key for key in stack.store.keys("ray_results/stack/"))
    # The job logged in as its team's MLflow user, which the API created: its model is the team's, and the
    # team's login (what `smartune admin mlflow-login stack` prints) reads the run.
    version = client.get_model_version_by_alias("smartune-stack-rte", "best")
    assert version.tags["smartune.job_id"] == job["id"]

    def read_run(team: str) -> int:
        url = f"{stack.mlflow.url}/api/2.0/mlflow/runs/get"
        login = (
            f"smartune-team-{team}",
            hmac.new(MLFLOW_TEAM_SECRET.encode(), team.encode(), "sha256").hexdigest(),
        )
        return httpx.get(url, params={"run_id": run.info.run_id}, auth=login, timeout=10).status_code

    assert read_run("stack") == 200
    _team(stack, "other")  # its MLflow user comes with the engine's next round: then 403, not 401
    wait_for(lambda: read_run("other") == 403, 60, "team other's MLflow user, refused team stack's run")


def _gpu_node_id(stack: Stack) -> str:
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    from service.engine.ray_jobs import auth_headers

    client = StateApiClient(address=stack.head.address, headers=auth_headers())
    nodes = client.list(StateResource.NODES, options=ListApiOptions(detail=True, filters=[("state", "=", "ALIVE")]),
                        raise_on_missing_output=True)  # fmt: skip
    (gpu_node,) = [n for n in nodes if float((n.resources_total or {}).get("GPU", 0)) > 0]
    return str(gpu_node.node_id)


@pytest.mark.slow
def test_a_job_resumes_from_s3_checkpoints_after_the_ray_head_dies(stack: Stack, mlflow_client: Any) -> None:
    api = _team(stack, "resume")
    _gpu_node_joined(api)
    # The crash follows the first sight of epoch 2 within a poll: 16 epochs leave it mid-sweep, and keep
    # attempt 2's rest of the sweep short (an epoch here is ~3 s: checkpoints to S3, metrics to MLflow).
    long_training = {**tiny_spec()["training"], "epochs": 16, "max_train_samples": 128}
    spec = tiny_spec(training=long_training, search_space={"axes": {}}, resources={"cpus": 1, "gpus": 1})
    job_id = api.submit(spec)
    running = api.wait(job_id, lambda j: any((t["last_epoch"] or 0) >= 2 for t in j["trials"]), timeout=300)
    assert running["trials"][0]["last_epoch"] < 8, "the sweep runs too fast to be interrupted"
    assert any("/checkpoint_" in key for key in stack.store.keys("ray_results/resume/"))
    stack.restart_ray()

    def final(job: dict[str, Any]) -> bool:
        stack.revive_worker()
        return job["state"] in FINAL

    job = api.wait(job_id, final, timeout=480)
    assert job["state"] == "SUCCEEDED", job["message"]
    assert [(a["number"], a["state"]) for a in job["attempts"]] == [(1, "LOST"), (2, "SUCCEEDED")]
    assert [(t["state"], t["last_epoch"]) for t in job["trials"]] == [("TERMINATED", 16)]

    run = mlflow_client(stack).get_run(job["trials"][0]["mlflow_run_id"])
    assert int(run.data.tags["smartune.resumed_from_epoch"]) >= 2  # from S3, not from scratch

"""Each image's Python environment, exactly what its Dockerfile installs (tests/support/image_envs.py
replays the Dockerfile with uv; cached per dependency layer), running that image's role as
docker-compose.yml configures it:

- service: compose's prestart command (`smartune migrate`) and the image's CMD (`smartune serve`) with the
  compose `api` environment, on PostgreSQL (psycopg2) and an S3 dataset store and storage path (moto's
  server, standing in for MinIO): readiness, `/metrics` with its token, a dataset upload written to S3;
- worker: a Ray head as compose's ray-head runs it, which runs a job's driver and trial (`python -m
  worker.tune.sweep`; the trial fetches the uploaded dataset from S3 and checkpoints there);
- mlflow: `deploy/mlflow/start.sh` on PostgreSQL with S3 artifacts and the basic-auth app, where the trial
  logs as its team's user.

And, per image, an import of every module its role needs (what its code imports anywhere, the database
driver compose names): a package the image lacks fails here naming the image, e.g. "service image:
`import boto3` failed (...)". The first build of an environment takes minutes (uv downloads and compiles
bytecode); later ones reuse the cached dependency layer and reinstall the project only."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy.engine import make_url

import smartune
from tests.integration.client import FINAL, Api, tiny_spec
from tests.support.cluster import REPO, RayHead, Server, free_port
from tests.support.image_envs import ImageEnv, build
from tests.support.image_roles import start_api_in, start_head_in, third_party_imports
from tests.support.postgres import Postgres
from tests.support.teamstack import MlflowServer, ObjectStore, start_mlflow_server, start_object_store

IMAGES = ("service", "worker", "mlflow")
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
MLFLOW_USER, MLFLOW_PASSWORD = "admin", "image-mlflow-secret"
METRICS_TOKEN = "image-metrics-token-0123456789"
OPTIONAL = {
    "datasets": "the `hub` extra (Hugging Face dataset ids, online only): no image installs it",
    "accelerate": "the `hf` extra (smart_core.integrations, for a user's own loop): no role runs it",
}


def _driver(url: str) -> str:
    """The DB-API module SQLAlchemy loads for a database URL of the compose file (by its scheme)."""
    return str(make_url(url.split("://", 1)[0] + "://").get_dialect().import_dbapi().__name__)


def role_imports(image: str) -> dict[str, str]:
    """What an image's role imports (-> why): the code it runs, lazy imports included, and what its
    configuration makes a library load (compose's database URLs, S3 artifacts)."""
    if image == "service":
        api_db = COMPOSE["services"]["api"]["environment"]["DATABASE_URL"]
        return third_party_imports("service") | {
            "cli.main": "the image's CMD, `smartune serve` (and with it the SDK, `smartune`)",
            _driver(api_db): "compose's DATABASE_URL",
            "boto3": "compose's SMARTUNE_DATASET_STORE and SMARTUNE_STORAGE_PATH (s3://)",
        }
    if image == "worker":
        found = third_party_imports("worker", "smart_core")
        return {name: why for name, why in found.items() if name.split(".")[0] not in OPTIONAL}
    mlflow = COMPOSE["services"]["mlflow"]
    return {
        "mlflow.server": "`mlflow server` (deploy/mlflow/start.sh)",
        "mlflow.server.auth": "`--app-name basic-auth`",
        _driver(mlflow["environment"]["MLFLOW_BACKEND_STORE_URI"]): "compose's MLFLOW_BACKEND_STORE_URI",
        "boto3": f"`--artifacts-destination {mlflow['command'][1]}`",
    }


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ImageEnv]]:
    built: dict[str, ImageEnv] = {}
    try:
        for image in IMAGES:
            built[image] = build(image, tmp_path_factory.mktemp(f"image-{image}"))
        yield built
    finally:
        for env in built.values():
            env.release()


@pytest.mark.usefixtures("starts_processes")  # uv, and each image's python
@pytest.mark.parametrize("image", IMAGES)
def test_each_image_imports_what_its_role_needs(envs: dict[str, ImageEnv], image: str) -> None:
    env = envs[image]
    problems = env.failed_imports(role_imports(image))
    built = f"built from deploy/{image}.Dockerfile in {env.seconds:.0f} s (layer cached: {env.cached}):"
    assert not problems, "\n".join([*problems, built, *env.steps])


@pytest.mark.usefixtures("starts_processes")
def test_the_worker_image_runs_the_sweep_entrypoint(envs: dict[str, ImageEnv], tmp_path: Path) -> None:
    worker = envs["worker"]
    done = subprocess.run([worker.python, "-m", "worker.tune.sweep", "--help"], cwd=tmp_path,
                          env=worker.process_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"worker image: `python -m worker.tune.sweep --help`:\n{done.stderr[-3000:]}"
    assert "--job-id" in done.stdout


@dataclass
class ImageStack:
    store: ObjectStore
    mlflow: MlflowServer
    head: RayHead
    api: Server


def _api_env(urls: dict[str, str], data_dir: Path, port: int, store: ObjectStore) -> dict[str, str]:
    """compose's `api` environment, each name given its native value (a name added there without one here
    fails with KeyError, so the service image is always run with what compose gives it)."""
    native = {
        "SMARTUNE_ENV": "production",
        "SMARTUNE_HOST": "127.0.0.1",
        "SMARTUNE_PORT": str(port),
        "SMARTUNE_DATA_DIR": str(data_dir),
        "SMARTUNE_BOOTSTRAP_KEY_FILE": str(data_dir / "admin-key"),
        "SMARTUNE_MIGRATE_ON_START": "false",
        "DATABASE_URL": urls["database"],
        "RAY_ADDRESS": urls["ray"],
        "RAY_AUTH_TOKEN": (Path.home() / ".ray" / "auth_token").read_text().strip(),
        "MLFLOW_TRACKING_URI": urls["mlflow"],
        "MLFLOW_TRACKING_USERNAME": MLFLOW_USER,
        "MLFLOW_TRACKING_PASSWORD": MLFLOW_PASSWORD,
        "SMARTUNE_MLFLOW_TEAM_SECRET": "image-mlflow-team-secret-0123456789abcdef",
        "SMARTUNE_MLFLOW_UI_URL": urls["mlflow"],
        "SMARTUNE_MLFLOW_UI_PROTECTED": "true",
        "SMARTUNE_STORAGE_PATH": f"s3://{store.bucket}/ray_results",
        "SMARTUNE_DATA_ROOTS": str(data_dir.parent / "data-roots"),
        "SMARTUNE_DATASET_STORE": f"s3://{store.bucket}/datasets",
        "SMARTUNE_HUB_ALLOW": "",
        "SMARTUNE_WEBHOOK_ALLOW_CIDRS": "",
        "SMARTUNE_METRICS_TOKEN": METRICS_TOKEN,
        "SMARTUNE_DASHBOARD_SECRET": "image-dashboard-secret-0123456789abcdef",
        "SMARTUNE_LOG_FORMAT": "json",
        "TOKENIZERS_PARALLELISM": "false",
        **{name: value for name, value in store.env.items() if name.startswith("AWS_")},
    }
    harness = {"SMARTUNE_SCHEDULER_INTERVAL_S": "0.5", "SMARTUNE_CAPACITY_TTL_S": "1",  # a faster engine
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # the image's ENV  # fmt: skip
    return {name: native[name] for name in COMPOSE["services"]["api"]["environment"]} | harness


def _node_env(mlflow_url: str, store: ObjectStore, data_dir: Path) -> dict[str, str]:
    """compose's ray-head environment (its Ray token comes from ~/.ray/auth_token), native values."""
    native = {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": (Path.home() / ".ray" / "auth_token").read_text().strip(),
        "RAY_USAGE_STATS_ENABLED": "0",
        "MLFLOW_TRACKING_URI": mlflow_url,
        "SMARTUNE_DATA_DIR": str(data_dir),
        "HF_HOME": str(data_dir / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **store.env,
    }
    return {name: native[name] for name in COMPOSE["services"]["ray-head"]["environment"]}


@pytest.fixture(scope="module")
def stack(
    envs: dict[str, ImageEnv], postgres: Postgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ImageStack]:
    tmp = tmp_path_factory.mktemp("image-stack")
    suffix = os.urandom(3).hex()
    psycopg2 = "postgresql+psycopg2://postgres:image-db-secret@"  # compose's scheme; the server trusts
    job_db, mlflow_db, auth_db = (
        postgres.create_database(f"{name}_{suffix}").replace("postgresql://postgres@", psycopg2)
        for name in ("smartune", "mlflow", "mlflow_auth")
    )
    store = start_object_store("smartune")
    started: list[Any] = [store]
    try:
        in_image = {"PATH": envs["mlflow"].process_env()["PATH"], "PYTHONPATH": ""}  # empty: no repo code
        mlflow = start_mlflow_server(backend_uri=mlflow_db, auth_db_uri=auth_db, artifacts="s3://smartune/mlflow",
                                     env=store.env | in_image, username=MLFLOW_USER, password=MLFLOW_PASSWORD)  # fmt: skip
        started.append(mlflow)
        command_line = Path(f"/proc/{mlflow.process.pid}/cmdline").read_bytes().decode()
        assert str(envs["mlflow"].bin) in command_line, f"mlflow server is not the image's: {command_line}"
        head = start_head_in(envs["worker"], _node_env(mlflow.url, store, tmp / "ray-data"), num_cpus=2)
        started.append(head)
        urls = {"database": job_db, "ray": head.address, "mlflow": mlflow.url}
        api_env = _api_env(urls, tmp / "data", free_port(), store)
        prestart = COMPOSE["services"]["prestart"]["command"]
        api = start_api_in(envs["service"], api_env, prestart, tmp / "data")
        started.append(api)
        yield ImageStack(store, mlflow, head, api)
    finally:
        for part in reversed(started):
            part.stop()


def _rte_folder(folder: Path) -> Path:
    """A small RTE-shaped dataset (the GLUE header; 32 training and 16 dev pairs)."""
    folder.mkdir()
    for split, rows in (("train", 32), ("dev", 16)):
        lines = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(rows):
            label = ("entailment", "not_entailment")[i % 2]
            lines.append(
                f"{i}\tThe cat number {i} sat on the mat.\tA cat {'sat' if i % 2 == 0 else 'flew'}.\t{label}"
            )
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_the_images_run_a_job_on_an_uploaded_dataset(stack: ImageStack, tmp_path: Path) -> None:
    api_url = stack.api.url
    ready = httpx.get(f"{api_url}/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json()["status"] == "ok", ready.text  # PostgreSQL and Ray
    assert httpx.get(f"{api_url}/metrics", timeout=30).status_code == 401
    scrape = httpx.get(f"{api_url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30)
    assert scrape.status_code == 200 and "smartune_up 1.0" in scrape.text

    admin_key = (stack.api.data_dir / "admin-key").read_text().strip()
    key = Api(stack.api, admin_key).team_key("images")
    with smartune.Client(url=api_url, key=key) as client:  # the upload: service image -> S3
        made = client.push_dataset(_rte_folder(tmp_path / "rte"), "rte-tiny", "rte")
    assert made["rows"] == {"train": 32, "dev": 16}
    stored = stack.store.keys("datasets/")
    assert any(made["digest"] in k and k.endswith("manifest") for k in stored), f"no manifest in S3: {stored}"

    api = Api(stack.api, key)
    axes = {"learning_rate": {"type": "grid", "values": [1e-4]}}
    spec = tiny_spec(data="dataset:rte-tiny", method="vanilla", search_space={"axes": axes})
    job = api.wait(api.submit(spec), lambda j: j["state"] in FINAL, timeout=600)
    assert job["state"] == "SUCCEEDED", f"{job['message']}\n{stack.api.output()[-3000:]}"
    (trial,) = job["trials"]
    # The worker image fetched the dataset from S3 and checkpointed there; the MLflow image took the run.
    assert any("/checkpoint_" in k for k in stack.store.keys("ray_results/images/")), (
        "no Tune checkpoint in S3"
    )
    run = httpx.get(f"{stack.mlflow.url}/api/2.0/mlflow/runs/get", params={"run_id": trial["mlflow_run_id"]},
                    auth=(MLFLOW_USER, MLFLOW_PASSWORD), timeout=30)  # fmt: skip
    assert run.status_code == 200, run.text
    tags = {tag["key"]: tag["value"] for tag in run.json()["run"]["data"]["tags"]}
    assert tags["smartune.prov.dataset_sha256"] == made["digest"]
    artifacts = stack.store.keys("mlflow/")
    assert any(trial["mlflow_run_id"] in k for k in artifacts), f"no artifact of the run in S3: {artifacts}"

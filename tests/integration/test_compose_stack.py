"""docker-compose.yml run for real (`make deploy-test`; the `slow` tier): the service, worker (its CPU
variant) and MLflow images built from deploy/*.Dockerfile on a Debian base made with debootstrap
(tests/support/docker_engine.py), the stack started with `docker compose up --wait` under
tests/compose/override.yml (PostgreSQL from Debian's packages and moto's S3 server where no registry gives
the public images; no GPU worker), then, through the published API only: a team, a dataset uploaded to S3, a
tiny sweep trained on the CPU worker's container to SUCCEEDED with its results, its best checkpoint read
back from MLflow's artifact store, an audit that PASSes, /metrics with the metrics token; then the Ray head
container is killed mid-job and the job resumes from its S3 checkpoints. Also: every image runs as a
non-root user, on a read-only root file system where its Dockerfile says so; each image imports what its
role needs (naming the image); the API container has every variable the stack needs (naming it).

It replaced the native team-stack test (test_team_stack.py, the same services as host processes): each of
its checks is made here on the images themselves. Skipped,
with the reason, where no Docker engine can start or where building the images would leave the disk over
95% full (they take about 8 GB cold). Measurements go to out/compose_stack.json."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from packaging.requirements import Requirement

from tests.integration.client import FINAL, Api, tiny_spec
from tests.support.cluster import Server, free_port, wait_for
from tests.support.compose_stack import (
    METRICS_TOKEN,
    REPO,
    Built,
    ComposeStack,
    build,
    env_file,
    images,
    prune_replaced_images,
    remove_images,
)
from tests.support.docker_engine import (
    BASE_IMAGE,
    EngineUnavailable,
    check_disk_room,
    docker_root,
    ensure_base_image,
    ensure_engine,
    stage_torch_cpu_wheel,
)
from tests.support.image_roles import third_party_imports

# The first test's set-up builds everything on a clean machine: apt, debootstrap (~2.5 min), three images
# (the worker's ~8 min): over the suite's 15-minute limit per test, so this module gets an hour. The tiers'
# `--dist loadscope` keeps the module on one worker: two stacks under one compose project would tear each
# other down.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

MEASUREMENTS = REPO / "out" / "compose_stack.json"
# What the tests below need from the API container's environment (docker-compose.yml's `api` service):
# each one's absence fails test_the_api_container_has_what_the_stack_needs, naming it.
API_VARIABLES = (
    "SMARTUNE_ENV", "SMARTUNE_DATA_DIR", "SMARTUNE_BOOTSTRAP_KEY_FILE", "SMARTUNE_MIGRATE_ON_START", "DATABASE_URL",
    "RAY_ADDRESS", "RAY_AUTH_TOKEN", "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
    "SMARTUNE_MLFLOW_TEAM_SECRET", "SMARTUNE_MLFLOW_UI_PROTECTED", "SMARTUNE_STORAGE_PATH", "SMARTUNE_DATA_ROOTS",
    "SMARTUNE_DATASET_STORE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION",
    "SMARTUNE_METRICS_TOKEN", "SMARTUNE_DASHBOARD_SECRET", "SMARTUNE_LOG_FORMAT", "TOKENIZERS_PARALLELISM",
)  # fmt: skip
OUR_SERVICES = {"api": "service", "prestart": "service", "mlflow": "mlflow", "ray-head": "worker",
                "ray-cpu-worker": "worker"}  # fmt: skip


def _record(**values: Any) -> None:
    MEASUREMENTS.parent.mkdir(exist_ok=True)
    found = json.loads(MEASUREMENTS.read_text()) if MEASUREMENTS.is_file() else {}
    MEASUREMENTS.write_text(json.dumps(found | values, indent=2) + "\n")


@pytest.fixture(scope="module")
def stack() -> Iterator[ComposeStack]:
    try:
        engine = ensure_engine()
    except EngineUnavailable as err:
        pytest.skip(f"no Docker engine can start here: {err}")
    specs = images()
    tags = [BASE_IMAGE, *(spec.tag for spec in specs)]
    try:
        check_disk_room(tags)
        free_before = shutil.disk_usage(docker_root()).free
        base_seconds = ensure_base_image()
        stage_torch_cpu_wheel()
    except EngineUnavailable as err:
        pytest.skip(f"the stack's images cannot be built here: {err}")
    with ThreadPoolExecutor(max_workers=3) as pool:  # the cold builds wait on the package index mostly
        built: list[Built] = list(pool.map(build, specs))
    _record(engine=engine, base_image_build_s=round(base_seconds, 1),
            build_disk_used_mb=round((free_before - shutil.disk_usage(docker_root()).free) / 1e6),
            images={b.name: {"tag": b.tag, "build_s": round(b.seconds, 1), "size_mb": round(b.megabytes)}
                    for b in built})  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="smartune-stack-"))
    port = free_port()  # the API's published port, on this host's loopback
    stack = ComposeStack(env_file(folder, port), port)
    stack.down()  # a stack an interrupted run left behind
    try:
        started = time.monotonic()
        up_s = stack.up()
        wait_for(lambda: _ready(stack), 180, "the API's /readyz")
        _record(compose_up_wait_s=round(up_s, 1), up_to_readyz_ok_s=round(time.monotonic() - started, 1))
        yield stack
    finally:
        stack.down()
        prune_replaced_images()
        shutil.rmtree(folder, ignore_errors=True)  # the stack's .env: its secrets
        if os.environ.get("CI") == "true":  # a CI machine builds cold and is thrown away: give the disk back
            remove_images(tags)  # to the tests still running


def _ready(stack: ComposeStack) -> bool:
    try:
        answer = httpx.get(f"{stack.url}/readyz", timeout=10)
    except httpx.TransportError:
        return False
    return answer.status_code == 200 and answer.json().get("status") == "ok"


def _api(stack: ComposeStack, key: str) -> Api:
    return Api(cast(Server, stack), key)


def _admin(stack: ComposeStack) -> Api:
    done = stack.exec("api", "cat", "/var/lib/smartune/admin-key")
    assert done.returncode == 0, f"service image: no bootstrap admin key: {done.stderr}\n{stack.logs('api')}"
    return _api(stack, done.stdout.strip())


def _in_api(stack: ComposeStack, code: str, *args: str) -> Any:
    """Python run in the API container (the service image, the API's environment); its last line, as JSON."""
    done = stack.exec("api", "python", "-c", code, *args)
    assert done.returncode == 0, f"service image: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_images_run_as_non_root_on_a_read_only_root_where_they_say_so(stack: ComposeStack) -> None:
    for service, image in OUR_SERVICES.items():
        container = stack.inspect(service)
        config, host = (
            cast(dict[str, Any], container["Config"]),
            cast(dict[str, Any], container["HostConfig"]),
        )
        assert config["User"].split(":")[0] not in {"", "0", "root"}, (
            f"{image} image ({service}) runs as root"
        )
        read_only = (config.get("Labels") or {}).get("io.smartune.read-only-root-fs") == "true"
        assert host["ReadonlyRootfs"] == read_only, f"{service}: read-only root {host['ReadonlyRootfs']}, " \
                                                   f"its {image} image says {read_only}"  # fmt: skip
        if service == "prestart":
            continue  # a one-shot that has exited: what it ran as is its configuration above
        uid = stack.exec(service, "id", "-u")
        assert uid.returncode == 0 and uid.stdout.strip() != "0", f"{image} image ({service}) runs as uid 0"
        probe = stack.exec(service, "touch", "/probe-write")  # as the non-root user: EACCES unless read-only
        refused = "Read-only file system" in probe.stderr
        assert refused == read_only, f"{service}: writing / gave {probe.returncode} {probe.stderr.strip()!r}"
    assert stack.inspect("api")["HostConfig"]["ReadonlyRootfs"], "the service image says read-only"  # type: ignore[index]


def test_the_api_container_has_what_the_stack_needs(stack: ComposeStack) -> None:
    environment = cast(list[str], cast(dict[str, Any], stack.inspect("api")["Config"])["Env"])
    present = {entry.partition("=")[0] for entry in environment}
    missing = [name for name in API_VARIABLES if name not in present]
    assert not missing, f"docker-compose.yml's api service lacks {missing}"


def _optional_modules() -> set[str]:
    """Top-level modules of the extras the worker image leaves out (it installs the dependencies and the
    `s3` extra): `hub`'s datasets, `hf`'s accelerate, the dev tools."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def names(texts: list[str]) -> set[str]:
        return {Requirement(text).name.lower().replace("-", "_") for text in texts}

    left_out = {name for extra, texts in extras.items() if extra != "s3" for name in names(texts)}
    return left_out - names(project["dependencies"] + extras["s3"])


def _role_imports() -> dict[str, dict[str, str]]:
    """Per image, the other distributions' modules its code imports (-> the file that does)."""
    service = third_party_imports("service") | {
        "psycopg2": "compose's DATABASE_URL (postgresql+psycopg2)",
        "boto3": "compose's SMARTUNE_DATASET_STORE and SMARTUNE_STORAGE_PATH (s3://)",
    }
    found = third_party_imports("worker", "smart_core")
    worker = {name: why for name, why in found.items() if name.split(".")[0] not in _optional_modules()}
    worker["boto3"] = "the S3 dataset store, read by trials"
    mlflow = {"mlflow.server.auth": "--app-name basic-auth", "psycopg2": "MLFLOW_BACKEND_STORE_URI",
              "boto3": "--artifacts-destination s3://"}  # fmt: skip
    return {"api": service, "ray-head": worker, "mlflow": mlflow}


@pytest.mark.parametrize("service", ["api", "ray-head", "mlflow"])
def test_each_image_imports_what_its_role_needs(stack: ComposeStack, service: str) -> None:
    needed = _role_imports()[service]
    code = ("import importlib, json, sys\nfailed = {}\nfor name in sys.argv[1:]:\n    try:\n"
            "        importlib.import_module(name)\n    except Exception as err:\n"
            "        failed[name] = f'{type(err).__name__}: {err}'\nprint(json.dumps(failed))")  # fmt: skip
    done = stack.exec(service, "python", "-c", code, *sorted(needed))
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    image = OUR_SERVICES[service]
    assert not failed, "\n".join(f"{image} image ({stack.inspect(service)['Config']['Image']}): `import {name}` "  # type: ignore[index]
                                 f"failed ({error}); needed for {needed[name]}" for name, error in failed.items())  # fmt: skip


def _push_rte(api: Api, glue_dir: Path, train_rows: int = 64) -> dict[str, Any]:
    """A few real RTE pairs uploaded as `rte-small` (multipart, as the SDK sends it), to S3."""
    files = []
    for split, rows in (("train", train_rows + 1), ("dev", 17)):  # the header and a few pairs
        lines = (glue_dir / "RTE" / f"{split}.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
        files.append(("files", (f"{split}.tsv", "".join(lines[:rows]).encode(), "text/tab-separated-values")))
    made = api("POST", "/api/v1/datasets", expect=201, data={"name": "rte-small", "task": "rte"}, files=files)
    return dict(made.json())


def test_a_tiny_sweep_on_an_uploaded_dataset_through_the_published_api(
    stack: ComposeStack, glue_dir: Path
) -> None:
    assert _ready(stack)
    api = _api(stack, _admin(stack).team_key("stack"))
    made = _push_rte(api, glue_dir)
    assert made["rows"] == {"train": 64, "dev": 16}, made
    stored = _in_api(stack, "import boto3, json, os; c = boto3.client('s3'); print(json.dumps("
                     "[o['Key'] for o in c.list_objects_v2(Bucket='smartune', Prefix='datasets/').get('Contents', [])]))")  # fmt: skip
    assert stored, "the upload is not in S3 (SMARTUNE_DATASET_STORE)"
    grid = {"learning_rate": {"type": "grid", "values": [1e-4, 5e-4]}}
    spec = tiny_spec(data="dataset:rte-small", method="smart", search_space={"axes": grid})
    started = time.monotonic()
    job = api.wait(api.submit(spec), lambda j: j["state"] in FINAL, timeout=600, past_the_end=True)
    _record(tiny_sweep_s=round(time.monotonic() - started, 1))
    assert job["state"] == "SUCCEEDED", f"{job['message']}\n{stack.logs('api', 'ray-head', 'ray-cpu-worker')}"
    assert len(job["trials"]) == 2 and all(t["state"] == "TERMINATED" for t in job["trials"])
    summaries: list[dict[str, Any]] = []  # the summary may come a poll after SUCCEEDED
    wait_for(lambda: bool(summaries.append(_results(api, job["id"])) or summaries[-1]), 120, "the results")
    best = summaries[-1]["best"]
    assert best["run_id"] in {t["mlflow_run_id"] for t in job["trials"]}
    # The best checkpoint, read back from MLflow's artifact store (proxied S3) by the API container's client.
    files = _in_api(stack, "import json, sys, tempfile, pathlib; from mlflow import MlflowClient; "
                    "p = pathlib.Path(MlflowClient().download_artifacts(sys.argv[1], 'best_checkpoint', tempfile.mkdtemp())); "
                    "print(json.dumps(sorted(x.name for x in p.iterdir())))", best["run_id"])  # fmt: skip
    assert "config.json" in files and any(name.endswith(".safetensors") for name in files), files
    # The job logged in as its team's MLflow user (made by the API): the model is the team's, the team's
    # login reads the run, and another team's login gets 403 (as the native team-stack test checks).
    version = _in_api(stack, "import json; from mlflow import MlflowClient; "
                      "print(json.dumps(MlflowClient().get_model_version_by_alias('smartune-stack-rte', 'best').tags))")  # fmt: skip
    assert version["smartune.job_id"] == job["id"], version
    _admin(stack).team_key("other")
    wait_for(
        lambda: _mlflow_status(stack, "other", best["run_id"]) == 403,
        90,
        "team other refused team stack's run",
    )
    assert _mlflow_status(stack, "stack", best["run_id"]) == 200
    audit = api("POST", f"/api/v1/jobs/{job['id']}/audits", expect=201, json={}).json()
    done = api.wait(audit["id"], lambda j: j["state"] in FINAL, timeout=600, past_the_end=True)
    assert done["state"] == "SUCCEEDED", done["message"]
    report = api("GET", f"/api/v1/jobs/{audit['id']}/results").json()
    assert report["verdict"] == "PASS", report
    scrape = httpx.get(
        f"{stack.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
    )
    assert scrape.status_code == 200 and "smartune_up 1.0" in scrape.text, scrape.text[:500]
    assert httpx.get(f"{stack.url}/metrics", timeout=10).status_code == 401


def _mlflow_status(stack: ComposeStack, team: str, run_id: str) -> int:
    """The status MLflow answers `team`'s login (what `smartune admin mlflow-login TEAM` prints) for a run."""
    code = ("import hmac, json, os, sys, httpx; team, run = sys.argv[1:]; "
            "secret = os.environ['SMARTUNE_MLFLOW_TEAM_SECRET'].encode(); "
            "login = (f'smartune-team-{team}', hmac.new(secret, team.encode(), 'sha256').hexdigest()); "
            "url = os.environ['MLFLOW_TRACKING_URI'] + '/api/2.0/mlflow/runs/get'; "
            "print(httpx.get(url, params={'run_id': run}, auth=login, timeout=10).status_code)")  # fmt: skip
    return int(_in_api(stack, code, team, run_id))


def _diagnosis(stack: ComposeStack, job_id: str) -> str:
    """What a failed job's assertion says, most telling first: the job, its timeline and each attempt's
    driver log as an admin reads them (a team's view drops the log's tail), then the containers' logs' tail
    (pytest cuts a long message from its end)."""
    admin = _admin(stack)
    job = admin("GET", f"/api/v1/jobs/{job_id}", expect=None).json()
    parts = [f"job: {job.get('state')}: {job.get('message')}"]
    parts += [f"  {t.get('at')} {t.get('from_state')} -> {t.get('to_state')}: {t.get('reason')}"
              for t in job.get("transitions", [])]  # fmt: skip
    for attempt in job.get("attempts", []):
        log = admin("GET", f"/api/v1/jobs/{job_id}/logs", expect=None,
                    params={"attempt": attempt["number"], "tail": 40}).text  # fmt: skip
        parts.append(f"--- attempt {attempt['number']} ({attempt['state']}): its driver's log ---\n{log}")
    containers = stack.logs("api", "ray-head", "ray-cpu-worker")
    return "\n".join(parts) + "\n--- containers ---\n" + containers[-6000:]


def _results(api: Api, job_id: str) -> dict[str, Any]:
    answer = api("GET", f"/api/v1/jobs/{job_id}/results", expect=None)
    return dict(answer.json()) if answer.status_code == 200 else {}


def test_a_job_resumes_after_the_ray_head_container_is_killed(stack: ComposeStack, glue_dir: Path) -> None:
    api = _api(stack, _admin(stack).team_key("resume"))
    _push_rte(api, glue_dir, train_rows=128)
    long_training = {**tiny_spec()["training"], "epochs": 20, "max_train_samples": 128}
    spec = tiny_spec(data="dataset:rte-small", training=long_training, search_space={"axes": {}})
    job_id = api.submit(spec)
    running = api.wait(job_id, lambda j: any((t["last_epoch"] or 0) >= 2 for t in j["trials"]), timeout=600)
    assert running["trials"][0]["last_epoch"] < 10, "the sweep runs too fast to be interrupted"
    checkpoints = _in_api(stack, "import boto3, json; c = boto3.client('s3'); print(json.dumps("
                          "[o['Key'] for o in c.list_objects_v2(Bucket='smartune', Prefix='ray_results/resume/').get('Contents', [])]))")  # fmt: skip
    assert any("/checkpoint_" in key for key in checkpoints), checkpoints
    # A crash, not a stop: SIGKILL to the container's first process, so `restart: unless-stopped` applies.
    os.kill(cast(dict[str, Any], stack.inspect("ray-head")["State"])["Pid"], signal.SIGKILL)
    killed = time.monotonic()
    job = api.wait(job_id, lambda j: j["state"] in FINAL, timeout=900, past_the_end=True)
    _record(resume_after_head_kill_s=round(time.monotonic() - killed, 1))
    assert job["state"] == "SUCCEEDED", _diagnosis(stack, job_id)
    assert [(a["number"], a["state"]) for a in job["attempts"]] == [(1, "LOST"), (2, "SUCCEEDED")]
    assert [(t["state"], t["last_epoch"]) for t in job["trials"]] == [("TERMINATED", 20)]
    tags = _in_api(stack, "import json, sys; from mlflow import MlflowClient; "
                   "print(json.dumps(MlflowClient().get_run(sys.argv[1]).data.tags))", job["trials"][0]["mlflow_run_id"])  # fmt: skip
    assert int(tags["smartune.resumed_from_epoch"]) >= 2  # from S3, not from scratch

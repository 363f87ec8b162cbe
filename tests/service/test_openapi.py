"""The OpenAPI document is complete (every route, examples on the submit body, bearer auth) and true (every
status each route really answers is declared, with the body and headers really sent); `/` is the
placeholder page that points at it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from service import security
from service.engine.ray_jobs import RayJobError
from service.engine.rounds import Engine
from service.http.ratelimit import RateLimiter
from service.store.db import Database, connect
from tests.service.dataset_utils import rte_files, rte_tsv
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import auth, make_team, spec, submit
from tests.service.webhook_utils import URL, Receiver


def test_openapi_lists_every_route_with_auth_and_examples(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    for path in [
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/retry",
        "/api/v1/jobs/{job_id}/logs",
        "/api/v1/jobs/{job_id}/results",
        "/api/v1/pool",
        "/api/v1/pool/queue",
        "/api/v1/teams",
        "/api/v1/teams/{name}",
        "/api/v1/teams/{name}/keys",
        "/api/v1/keys/me",
        "/api/v1/keys/{key_id}",
        "/api/v1/webhooks",
        "/api/v1/webhooks/{webhook_id}",
        "/api/v1/webhooks/{webhook_id}/deliveries",
        "/healthz",
        "/readyz",
    ]:
        assert path in paths, path
    submit = paths["/api/v1/jobs"]["post"]
    examples = submit["requestBody"]["content"]["application/json"]["examples"]
    assert {"quick", "paper-grid"} <= set(examples)
    assert {"201", "200", "409", "413", "422"} <= set(submit["responses"])
    assert {p["name"]: p["in"] for p in submit["parameters"]} == {
        "idempotency-key": "header",
        "dry_run": "query",
    }
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "security" not in paths["/healthz"]["get"]
    assert "security" not in paths["/readyz"]["get"]
    assert all(op.get("description") or op.get("summary") for p in paths.values() for op in p.values())


def test_home_page_is_the_dashboard(client: TestClient) -> None:
    home = client.get("/", follow_redirects=False)
    assert home.status_code == 307 and home.headers["location"] == "/ui/jobs"
    page = client.get("/")  # followed: the dashboard asks for a key first
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert str(page.url).split("?")[0].endswith(("/ui/jobs", "/ui/login"))


# --- The document against real answers --------------------------------------------------------------
#
# Every operation is called in every way that makes it answer something else: valid, unknown ids, no key,
# the wrong role, bodies that are not JSON, too large or wrong, bad query values, past the rate limit,
# with the database down. Each answer's status must be declared, its body must match the declared schema
# and it must carry the declared headers; and each declared error status must really be produced (a
# status that cannot happen is a lie too).

Op = tuple[str, str]
Seen = list[tuple[Op, str, Any]]

BAD_QUERY = "-5"  # below every minimum, and no job state
NOT_PRODUCED: set[tuple[Op, str]] = set()  # declared statuses these probes cannot bring about (none)


class FrozenClock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def _operations(doc: dict[str, Any]) -> dict[Op, dict[str, Any]]:
    return {(m.upper(), p): op for p, ops in doc["paths"].items() for m, op in ops.items()}


def _fill(template: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], template)


def _valid_body(op: Op) -> Any:
    return {
        ("POST", "/api/v1/jobs"): spec(),
        ("POST", "/api/v1/teams"): {"name": "speech"},
        ("PATCH", "/api/v1/teams/{name}"): {"weight": 2},
        ("POST", "/api/v1/teams/{name}/keys"): {"name": "ci"},
        ("POST", "/api/v1/webhooks"): {"url": URL},
    }.get(op)


UPLOAD: Op = ("POST", "/api/v1/datasets")


def _body(op: Op) -> dict[str, Any]:
    """The request's body arguments: JSON, or a dataset upload's multipart form."""
    if op == UPLOAD:
        return {
            "data": {"name": "probe", "task": "rte"},
            "files": [("files", (n, d)) for n, d in _upload_files()],
        }
    body = _valid_body(op)
    return {"json": body} if body is not None else {}


def _upload_files() -> list[tuple[str, bytes]]:
    return [("train.tsv", rte_tsv(8)), ("dev.tsv", rte_tsv(4))]


def _key_for(op: Op, team_key: str, admin_key: str) -> str:
    method, path = op
    admin_only = path.startswith("/api/v1/teams") or method == "DELETE" or path.endswith("/publish")
    return admin_key if admin_only else team_key


class Prober:
    def __init__(self, client: TestClient, doc: dict[str, Any], keys: dict[str, str]) -> None:
        self.client, self.ops, self.keys = client, _operations(doc), keys
        self.seen: Seen = []

    def __call__(self, op: Op, why: str, key: str | None, values: dict[str, str], **kw: Any) -> Any:
        headers = {**(auth(key) if key else {}), **kw.pop("headers", {})}
        response = self.client.request(op[0], _fill(op[1], values), headers=headers, **kw)
        self.seen.append((op, why, response))
        return response

    def every(self, why: str, values: dict[str, str], *, key: str | None = "role") -> None:
        for op in self.ops:
            chosen = _key_for(op, self.keys["team"], self.keys["admin"]) if key == "role" else key
            self(op, why, chosen, values, **_body(op))


def _check(doc: dict[str, Any], seen: Seen) -> None:
    ops = _operations(doc)
    produced: dict[Op, set[str]] = {op: set() for op in ops}
    for op, why, response in seen:
        status = str(response.status_code)
        produced[op].add(status)
        declared = ops[op]["responses"]
        assert status in declared, f"{op} answered {status} ({why}), undeclared: {response.text[:200]}"
        entry = declared[status]
        for header in entry.get("headers", {}):
            assert header.lower() in response.headers, f"{op} {status} ({why}) lacks {header}"
        content = entry.get("content")
        if not content:
            continue
        media = response.headers["content-type"].split(";")[0]
        assert media in content, f"{op} {status} ({why}): {media}, declared {list(content)}"
        if media == "application/json":
            schema = {**content[media]["schema"], "components": doc["components"]}
            errors = list(Draft202012Validator(schema).iter_errors(response.json()))
            assert not errors, f"{op} {status} ({why}): {errors[0].message} in {response.text[:300]}"
    for op, operation in ops.items():
        missing = {s for s in operation["responses"] if s[0] in "45"} - produced[op]
        missing -= {s for (o, s) in NOT_PRODUCED if o == op}
        assert not missing, f"{op} declares {sorted(missing)}, which no probe produced"


def datasets_probed(probe: Prober, client: TestClient, db: Database, team_key: str, admin_key: str) -> None:
    """The dataset routes' answers that the passes over every route cannot bring about: a dataset `nlp` of
    team nlp for them to find; two teams' `shared` (409 without ?team=); a published one of another team."""
    other = make_team(db, "other")
    files = {"files": [("files", (n, d)) for n, d in rte_files().items()]}
    for key, name in ((team_key, "nlp"), (team_key, "shared"), (other, "shared"), (other, "theirs")):
        probe(UPLOAD, "setup", key, {}, data={"name": name, "task": "rte"}, **files)
    probe(
        ("POST", "/api/v1/datasets/{name}/{version}/publish"),
        "setup",
        admin_key,
        {"name": "theirs", "version": "1"},
    )
    probe(("DELETE", "/api/v1/datasets/{name}/{version}"), "a published one of another team", team_key,
          {"name": "theirs", "version": "1"})  # fmt: skip
    for op in (("GET", "/api/v1/datasets/{name}"), ("GET", "/api/v1/datasets/{name}/{version}"),
               ("POST", "/api/v1/datasets/{name}/{version}/publish"), ("DELETE", "/api/v1/datasets/{name}/{version}")):  # fmt: skip
        probe(op, "two teams' name", admin_key, {"name": "shared", "version": "1"})
        probe(op, "team too long", admin_key, {"name": "shared", "version": "1"}, params={"team": "x" * 65})
    probe(UPLOAD, "admin uploads", admin_key, {}, data={"name": "x", "task": "rte"}, **files)
    probe(UPLOAD, "a bad row", team_key, {}, data={"name": "x", "task": "sst2"}, **files)
    garbage = {"content-type": "multipart/form-data; boundary=b"}
    probe(UPLOAD, "not multipart inside", team_key, {}, content=b"garbage", headers=garbage)
    settings = client.app.state.settings  # type: ignore[attr-defined]
    limit, settings.dataset_max_bytes = settings.dataset_max_bytes, 1024
    probe(UPLOAD, "too large", team_key, {}, data={"name": "x", "task": "rte"}, **files)
    settings.dataset_max_bytes = limit
    full = make_team(db, "full", storage_quota_bytes=0)  # no room at all: every upload is past its quota
    probe(UPLOAD, "over the storage quota", full, {}, data={"name": "x", "task": "rte"}, **files)


def webhooks_probed(probe: Prober, client: TestClient, team_key: str, admin_key: str) -> str:
    """The webhook routes' answers the passes cannot bring about; the id of a webhook of team nlp."""
    hooks = ("POST", "/api/v1/webhooks")
    real = probe(hooks, "setup", team_key, {}, json={"url": URL}).json()["id"]
    probe(hooks, "admin registers", admin_key, {}, json={"url": URL})  # 403: a webhook is a team's
    probe(hooks, "a loopback URL", team_key, {}, json={"url": "http://127.0.0.1:9/x"})  # 422
    settings = client.app.state.settings  # type: ignore[attr-defined]
    limit, settings.webhook_max_per_team = settings.webhook_max_per_team, 1
    probe(hooks, "past the team's limit", team_key, {}, json={"url": URL})  # 409
    settings.webhook_max_per_team = limit
    for op in (
        ("GET", "/api/v1/webhooks/{webhook_id}/deliveries"),
        ("DELETE", "/api/v1/webhooks/{webhook_id}"),
    ):
        probe(op, "not a number", team_key, {"webhook_id": "x"})  # 422
    return str(real)


def _unreachable(tmp_path: Path) -> Database:
    folder = tmp_path / "gone"
    db = connect(f"sqlite:///{folder / 'x.db'}", timeout_s=0.5)
    shutil.rmtree(folder)
    return db


def test_the_document_declares_every_status_and_body_the_routes_send(
    client: TestClient,
    db: Database,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
    team_key: str,
    admin_key: str,
    tmp_path: Path,
    receiver: Receiver,
) -> None:
    doc = client.get("/openapi.json").json()
    Draft202012Validator.check_schema({"components": doc["components"]})
    probe = Prober(client, doc, {"team": team_key, "admin": admin_key})
    client.app.state.rate_limiter = RateLimiter(1000.0, 1000)  # type: ignore[attr-defined]  # till its turn
    done = submit(client, team_key, spec(name="done"))["id"]
    engine.tick()
    fake_tracker.summaries[done] = summary_for(done)
    fake_tracker.log_trial(done, "t1", "TERMINATED", 0.7)
    fake_ray.set(f"{done}-a1", "SUCCEEDED", logs="done\n")
    engine.tick()
    queued = submit(client, team_key)["id"]
    spare = security.parse_key_id(make_team(db, "spare")) or ""
    real = {"job_id": queued, "name": "nlp", "key_id": spare, "version": "1"}
    unknown = {
        "job_id": "job-nope",
        "name": "nope",
        "key_id": "000000000000",
        "version": "0",
        "webhook_id": "999999",
    }
    datasets_probed(probe, client, db, team_key, admin_key)
    real["webhook_id"] = webhooks_probed(probe, client, team_key, admin_key)

    # 2xx (and 409 for what they changed) with real resources; then 404s, 401s, 403s
    results = ("GET", "/api/v1/jobs/{job_id}/results")
    probe(results, "succeeded", team_key, {"job_id": done})
    probe(("GET", "/api/v1/jobs/{job_id}/logs"), "dispatched", team_key, {"job_id": done})
    probe(("POST", "/api/v1/jobs/{job_id}/cancel"), "succeeded", team_key, {"job_id": done})
    probe.every("valid", real)
    probe.every("conflict", real)  # the team exists, the job is cancelled, the key revoked (200 again)
    probe(
        ("DELETE", "/api/v1/keys/{key_id}"),
        "own key",
        admin_key,
        {"key_id": security.parse_key_id(admin_key) or ""},
    )
    jobs = ("POST", "/api/v1/jobs")
    for attempt in (spec(), spec(name="other")):  # a replay (200), then the same key, another spec (409)
        probe(jobs, "idempotency", team_key, {}, json=attempt, headers={"Idempotency-Key": "k1"})
    probe(jobs, "admin submits", admin_key, {}, json=spec())
    probe.every("unknown", unknown)
    probe.every("no key", real, key=None)
    probe.every("team key", real, key=team_key)
    logs = ("GET", "/api/v1/jobs/{job_id}/logs")
    probe(logs, "no such attempt", team_key, {"job_id": done}, params={"attempt": 9})
    probe(("GET", "/api/v1/models"), "no such team", admin_key, {}, params={"team": "nope"})

    # bodies and query values
    for op, operation in probe.ops.items():
        key = _key_for(op, team_key, admin_key)
        if "requestBody" in operation:
            probe(
                op, "malformed", key, real, content=b'{"name":', headers={"content-type": "application/json"}
            )
            probe(op, "too large", key, real, content=b"x" * (65 * 1024))
            probe(op, "wrong body", key, real, json=[])
            probe(op, "not json", key, real, content=b"name=x", headers={"content-type": "text/plain"})
        for param in operation.get("parameters", []):
            if param["in"] == "query":
                probe(op, f"bad {param['name']}", key, real, params={param["name"]: BAD_QUERY})

    # Ray down: the logs route and the readiness probe say so
    fake_ray.down = True
    probe(logs, "ray down", team_key, {"job_id": done})
    probe(("GET", "/readyz"), "ray down", None, {})
    fake_ray.down = False

    def odd(_submission_id: str) -> str:
        raise RayJobError("400: an answer nobody expected")

    fake_ray.logs = odd  # type: ignore[method-assign]
    odd_answer = probe(logs, "ray answers oddly", team_key, {"job_id": done})
    assert odd_answer.status_code == 503
    del fake_ray.logs

    # past the rate limit: every route behind a key
    clock = FrozenClock()
    client.app.state.rate_limiter = RateLimiter(1.0, 1, clock=clock)  # type: ignore[attr-defined]
    for caller in (team_key, admin_key, None):  # each bucket's one token
        client.get("/api/v1/keys/me", headers=auth(caller) if caller else {})
    probe.every("rate limit", real)
    probe.every("rate limit", real, key=None)

    # the database down: every route that needs it, cached keys or not
    clock.now += 1000
    client.app.state.rate_limiter = RateLimiter(1000.0, 1000)  # type: ignore[attr-defined]
    client.app.state.db = _unreachable(tmp_path)  # type: ignore[attr-defined]
    probe.every("database down", real)
    client.app.state.key_cache.clear()  # type: ignore[attr-defined]
    probe.every("database down, key not cached", real)

    _check(doc, probe.seen)
    statuses = {r.status_code for _op, _why, r in probe.seen}
    assert {200, 201, 400, 401, 403, 404, 409, 413, 415, 422, 429, 503} <= statuses


def test_the_422_schema_is_the_body_sent(client: TestClient, team_key: str) -> None:
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    body = schemas["ValidationErrorBody"]
    assert body["properties"]["detail"]["type"] == "string"  # not FastAPI's list
    assert body["properties"]["errors"]["type"] == "array"
    for operation in _operations(doc).values():
        if "422" in operation["responses"]:
            ref = operation["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ValidationErrorBody")
    sent = client.post("/api/v1/jobs", json=spec(training={"epochs": "many"}), headers=auth(team_key)).json()
    assert set(sent) == {"detail", "field", "errors"} and sent["field"] == "training.epochs"
    assert sent["errors"][0]["field"] == "training.epochs" and sent["detail"].startswith("training.epochs: ")


def test_a_method_not_allowed_lists_every_method_of_the_path(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    for path, operations in doc["paths"].items():
        url = _fill(
            path,
            {"job_id": "job-x", "name": "nlp", "key_id": "000000000000", "version": "1", "webhook_id": "1"},
        )
        for method in ("OPTIONS", "PUT", "HEAD"):
            if method.lower() in operations:
                continue
            response = client.request(method, url)
            assert response.status_code == 405, (method, path)
            allowed = {m.strip().lower() for m in response.headers["allow"].split(",")}
            assert allowed == set(operations), (method, path, response.headers["allow"])


def test_results_not_read_yet_are_a_conflict_not_a_missing_job(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    """A job that exists answers 404 for nothing: its summary, until the engine has read it, is a 409."""
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_tracker.down = True  # MLflow cannot give the summary: the engine will try again
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED")
    engine.tick()
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()["state"] == "SUCCEEDED"
    response = client.get(f"/api/v1/jobs/{job_id}/results", headers=auth(team_key))
    assert response.status_code == 409 and "not read yet" in response.json()["detail"]
    assert response.headers.get("retry-after") is None  # nothing says when MLflow will answer

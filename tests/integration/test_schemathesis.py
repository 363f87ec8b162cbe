"""The running API against its own OpenAPI document (schemathesis, every check on): `smartune serve` on the
shared Ray head, fuzzed with a team's key, without a key, and with the admin key; zero failures.

Schemathesis runs as its CLI (`schemathesis run`), one run per caller, each with its own config file; the
key reaches it through an environment variable named in that file, never the command line. Two settings
of the server and one of schemathesis are this test's, and why:

- the server's rate limit is raised: the fuzzer sends hundreds of requests a second from one key, and a
  run of 429s would test nothing else (429 itself is declared, and tested in tests/service);
- the sweep module is Python's `this`: a job the fuzzer manages to submit is really dispatched to Ray, and
  its driver prints the Zen of Python and exits instead of training (the job then fails: no trial ran);
  what is under test is the API, not the sweep, and the machine's cores stay with the fuzzer;
- `positive_data_acceptance` also accepts 413 and 422 from the operations that create or change things:
  a job spec valid by its JSON schema can still break the deployment's rules (the pool, the team's
  quotas, the grid's size, the data roots, the tasks the workers know), a team body its cross-field
  rule (default priority within the maximum), and a dataset upload's files the task's splits and rows
  (each file one split the task reads, every row readable by training's loader), which no JSON schema
  can express (the upload's `name` and `task` fields state their rules: tests/service/test_hostile_inputs.py);
- `not_a_server_error` accepts a 503 (never another 5xx) from the two operations whose answer depends on
  Ray's dashboard answering within the deployment's timeout: `/readyz` (that is what it reports) and a
  job's logs (read from Ray). On a loaded machine the dashboard can be slow; both declare the 503.
  Every other 5xx fails the test, from schemathesis or from the server's own access log.

The numbers (requests by status, test cases, failures) are printed; `-s` shows them.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import VENV_BIN, RayHead, Server, base_env, make_server

KEY_ENV = "SMARTUNE_FUZZ_KEY"
RUNS = [("team key", "team", 50), ("no key", None, 10), ("admin key", "admin", 30)]  # max examples
RUN_TIMEOUT_S = 420  # one run: 60 s on an idle 2-core machine, 132-181 s beside other load
CREATING = ["/api/v1/jobs", "/api/v1/teams", "/api/v1/teams/{name}", "/api/v1/datasets"]
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "413", "422", "429", "5xx"]  # 5xx: its own check
ON_RAY = ["/readyz", "/api/v1/jobs/{job_id}/logs"]
_ON_RAY = re.compile(r"^/readyz$|^/api/v1/jobs/[^/]+/logs$")
_ACCESS = re.compile(r'"(?:GET|POST|PATCH|DELETE|PUT|HEAD|OPTIONS|TRACE) (\S+) HTTP/1\.1" (\d{3})')


def _config(path: Path, *, with_key: bool) -> Path:
    lines = [f'headers = {{ Authorization = "Bearer ${{{KEY_ENV}}}" }}', ""] if with_key else []
    lines += [
        "[[operations]]",
        f"include-path = {json.dumps(CREATING)}",
        'include-method = ["POST", "PATCH"]',
        f"checks.positive_data_acceptance.expected-statuses = {json.dumps(ACCEPTED)}",
        "",
        "[[operations]]",
        f"include-path = {json.dumps(ON_RAY)}",
        'checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _statuses(server: Server) -> Counter[str]:
    """Requests by status from the server's access log; a 503 of an operation on Ray counts as `503 ray`."""
    return Counter(
        f"{status} ray" if status == "503" and _ON_RAY.match(path.split("?")[0]) else status
        for path, status in _ACCESS.findall(server.output())
    )


def _failures(output: str) -> str:
    """The failures section of schemathesis' output (or its end)."""
    start = output.find("FAILURES")
    return output[start : start + 12000] if start >= 0 else output[-12000:]


@pytest.fixture
def fuzzed_server(tmp_path: Path, ray_head: RayHead) -> Iterator[Server]:
    server = make_server(
        tmp_path,
        ray_address=ray_head.address,
        SMARTUNE_RATE_LIMIT_PER_S="5000",
        SMARTUNE_RATE_LIMIT_BURST="5000",
        SMARTUNE_SWEEP_MODULE="this",
        **ray_head.declared(),  # a spec sent before the engine read the pool is judged by the node, not a 503
    ).start()
    yield server
    server.stop()


def _fuzz(server: Server, tmp_path: Path, name: str, key: str | None, examples: int) -> dict[str, object]:
    slug = name.replace(" ", "-")
    report = tmp_path / f"{slug}.json"
    env = base_env() | ({KEY_ENV: key} if key else {})
    command = [str(VENV_BIN / "schemathesis"), "--config-file"]
    command += [str(_config(tmp_path / f"{slug}.toml", with_key=key is not None)), "run"]
    command += [f"{server.url}/openapi.json", "--checks", "all", "--max-examples", str(examples)]
    command += ["--seed", "1", "--workers", "1", "--no-color", "--request-timeout", "30"]
    command += ["--report", "json", "--report-json-path", str(report)]
    before = _statuses(server)
    started = time.monotonic()
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )  # in tmp_path: schemathesis keeps its cache (.schemathesis) in its working directory
    seconds = time.monotonic() - started
    time.sleep(0.5)  # the last access lines reach the server's log
    sent = _statuses(server) - before
    summary = json.loads(report.read_text()) if report.exists() else {}
    cases = summary.get("test_cases", {})
    print(  # noqa: T201 - the figures of the run, for the report
        f"schemathesis [{name}]: {sum(sent.values())} requests in {seconds:.0f} s, by status "
        f"{dict(sorted(sent.items()))}; test cases {cases}; failures {summary.get('failures')}"
    )
    assert run.returncode == 0, f"schemathesis [{name}] found failures:\n{_failures(run.stdout)}"
    assert not [s for s in sent if s.startswith("5") and not s.endswith("ray")], sent
    return {"requests": sum(sent.values()), "statuses": sent, "cases": cases}


@pytest.mark.slow
def test_the_live_api_conforms_to_its_openapi_document(fuzzed_server: Server, tmp_path: Path) -> None:
    admin_key = fuzzed_server.admin_key()
    admin = httpx.Client(
        base_url=fuzzed_server.url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30
    )
    created = admin.post("/api/v1/teams", json={"name": "fuzz", "cpu_quota": 2, "gpu_quota": 0})
    assert created.status_code == 201, created.text
    team_key = admin.post("/api/v1/teams/fuzz/keys", json={"name": "schemathesis"}).json()["key"]
    keys = {"team": team_key, "admin": admin_key}
    results = [_fuzz(fuzzed_server, tmp_path, name, keys.get(who or ""), n) for name, who, n in RUNS]
    assert sum(int(str(r["requests"])) for r in results) > 1000  # a real fuzz, not a handful of calls
    assert "unhandled error on" not in fuzzed_server.output()  # the 500 handler's log line: no bug hit

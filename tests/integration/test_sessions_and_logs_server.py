"""`smartune serve` for real, over HTTP: a dashboard session ends at logout and at its key's revocation even
for a browser that kept a copy of its cookie, and a real job's logs show a team no server internals (the
tracking URI, the data directory, the venv), while an admin reads them whole. One server for the file."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.client import FINAL, ONE_TRIAL, Api, tiny_spec
from tests.support.cluster import RayHead, Server, make_server

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture(scope="module")
def one_server(
    tmp_path_factory: pytest.TempPathFactory, ray_head: RayHead, glue_dir: Path
) -> Iterator[Server]:
    del glue_dir  # the server reads SMARTUNE_GLUE_DIR itself; the fixture skips without it
    server = make_server(tmp_path_factory.mktemp("sessions"), ray_address=ray_head.address).start()
    yield server
    server.stop()


def _csrf(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def _sign_in(server: Server, key: str) -> tuple[httpx.Client, str]:
    """A browser signed in through the login form; returns it and a copy of its session cookie."""
    browser = httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)
    form = browser.get("/ui/login")
    assert form.status_code == 200, form.text
    signed = browser.post("/ui/login", data={"csrf": _csrf(form.text), "key": key, "next": "/ui/jobs"})
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/jobs", signed.text
    cookie = browser.cookies.get("smartune_session")
    assert cookie and key not in cookie
    assert browser.get("/ui/jobs").status_code == 200
    return browser, cookie


def _replay(server: Server, cookie: str, path: str = "/ui/jobs") -> httpx.Response:
    """A request that sends a saved copy of a session cookie."""
    return httpx.get(server.url + path, headers={"Cookie": f"smartune_session={cookie}"}, timeout=30)


def test_logout_and_revocation_end_a_saved_cookies_session(one_server: Server) -> None:
    admin = Api(one_server, one_server.admin_key())
    key = admin.team_key("web")
    browser, saved = _sign_in(one_server, key)
    assert _replay(one_server, saved).status_code == 200
    logout = browser.post("/ui/logout", data={"csrf": _csrf(browser.get("/ui/jobs").text)})
    assert logout.status_code == 303 and logout.headers["location"] == "/ui/login"
    after = _replay(one_server, saved)
    assert after.status_code == 303 and after.headers["location"].startswith("/ui/login")
    assert _replay(one_server, saved, "/ui/data/jobs").status_code == 401

    second = str(admin("POST", "/api/v1/teams/web/keys", expect=201, json={}).json()["key"])
    _browser, kept = _sign_in(one_server, second)
    assert _replay(one_server, kept).status_code == 200
    admin("DELETE", f"/api/v1/keys/{second.split('_')[1]}")
    assert _replay(one_server, kept).status_code == 303
    _other, still = _sign_in(one_server, key)  # the first key was never revoked: it signs in again
    assert _replay(one_server, still).status_code == 200


def test_a_real_jobs_logs_show_a_team_no_server_internals(one_server: Server) -> None:
    admin = Api(one_server, one_server.admin_key())
    api = Api(one_server, admin.team_key("nlp"))
    job_id = api.submit(tiny_spec(search_space=ONE_TRIAL))
    job = api.wait(job_id, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    whole = admin("GET", f"/api/v1/jobs/{job_id}/logs").text
    assert "sqlite:///" in whole and str(one_server.data_dir) in whole  # what there is to hide
    node = re.search(r"Ray cluster at address: ([\d.]+):", whole)
    assert node, whole[:2000]
    logs = api("GET", f"/api/v1/jobs/{job_id}/logs").text
    for internal in ("sqlite:///", str(one_server.data_dir), sys.prefix, "/.venv/", node.group(1)):
        assert internal not in logs, internal
    summary = json.loads(logs.strip().splitlines()[-1])  # the driver's summary line, still JSON
    assert summary["job_id"] == job_id and summary["tracking_uri"] == "<uri>"

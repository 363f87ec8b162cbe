"""The dashboard's logs, downloads and spec editor in a real browser on a real sweep (issue 31): `smartune
serve` on a throwaway Ray head runs a tiny sweep; in headless Chromium (as tests/integration/
test_dashboard_browser.py drives it) the line each trial printed appears in the driver's log view and in
the trial's own view, neither shows a team the server's data directory, the best checkpoint and the
registered model download as tars of their files, and the editor shows a misspelt field with its hint.
Screenshots under the test's tmp_path."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest

from bench.dashboard import CHROMIUM_ARGS, chromium_path, sign_in
from tests.integration.client import FINAL, Api, tiny_spec
from tests.support.cluster import Server

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium: `apt-get install -y chromium` (see .ci/run)"
)


def _tar_names(body: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}


def test_a_line_the_trial_printed_appears_in_the_logs_view(server: Server, tmp_path: Path) -> None:
    admin = Api(server, server.admin_key())
    key = admin.team_key("nlp")
    api = Api(server, key)
    job_id = api.submit(tiny_spec())
    job = api.wait(job_id, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    trial_ids = [t["trial_id"] for t in job["trials"]]
    assert len(trial_ids) == 2

    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = chromium.new_context(viewport={"width": 1300, "height": 900}).new_page()
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            sign_in(page, server.url, key)

            page.goto(f"{server.url}/ui/jobs/{job_id}")
            page.click("#driver-log-link")
            page.wait_for_selector("body[data-ready='1']")
            driver = page.inner_text("#log")
            for trial_id in trial_ids:  # the trial's own line, as Ray forwarded it to the driver's log
                assert f"trial {trial_id}: start 1 in attempt 1" in driver
            assert str(server.data_dir) not in driver and "<path>" in driver  # scrubbed for a team's key
            page.screenshot(path=str(tmp_path / "driver-log.png"), full_page=True)

            page.select_option("select[name=trial]", trial_ids[1])  # the page's own trial choice
            page.wait_for_url(re.compile(rf"/logs\?trial={re.escape(trial_ids[1])}"))
            page.wait_for_selector("body[data-ready='1']")
            own = page.inner_text("#log")
            assert f"--- start 1 ---\ntrial {trial_ids[1]}: start 1 in attempt 1" in own
            assert f"trial {trial_ids[0]}:" not in own  # only this trial's lines
            page.screenshot(path=str(tmp_path / "trial-log.png"), full_page=True)

            page.goto(f"{server.url}/ui/jobs/{job_id}")
            for link, expected in (("#checkpoint-link", "model.safetensors"), (".model-link", "MLmodel")):
                href = page.get_attribute(link, "href")
                assert href is not None
                got = page.request.get(f"{server.url}{href}")  # the page's own session cookie
                assert got.ok and got.headers["content-type"] == "application/x-tar", got.text()
                assert expected in _tar_names(got.body())

            page.click("#new-job-link")
            text = page.input_value("textarea[name=spec]")
            page.fill("textarea[name=spec]", text.replace("training:\n", "training:\n  epocs: 2\n", 1))
            page.click("button[value=check]")
            problem = page.inner_text("#problems")
            assert "training.epocs" in problem and "did you mean `training.epochs`" in problem
            page.screenshot(path=str(tmp_path / "editor.png"), full_page=True)
            assert not errors, errors
        finally:
            chromium.close()

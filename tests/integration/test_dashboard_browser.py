"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright's Python package
(`executable_path` at the system Chromium; never `playwright install`). Skips, saying why, where Chromium
or Playwright is missing (`.ci/run` installs Chromium).

The app runs under uvicorn in a thread (bench/served_sweep.py) with an in-memory tracker. Checks
what is drawn against the API: as many heat-map cells as grid cells, as many curve points as trials x
epochs, the numbers shown equal to the API's; on a running sweep a curve gains a point without a reload;
another team's key cannot open the job page or its data; no Content-Security-Policy violation blocks a
script. A screenshot of each page is saved under the test's tmp_path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.dashboard import CHROMIUM_ARGS, chromium_path, reveal_charts, sign_in
from bench.served_sweep import InMemoryTracker, Served, build_app, seed_sweep

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium: `apt-get install -y chromium` (see .ci/run)"
)

LRS, LAMBDAS, SEEDS, EPOCHS = [1e-5, 3e-5], [1.0, 3.0, 5.0], [1, 2], 3


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Served, Any, InMemoryTracker]]:
    tracker = InMemoryTracker()
    app = build_app(tmp_path / "data", tracker)
    with Served(app) as server:
        yield server, app, tracker


@pytest.fixture
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _page(browser: Any, violations: list[str]) -> Any:
    page = browser.new_context(viewport={"width": 1300, "height": 900}).new_page()
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "console.log('CSP', e.violatedDirective, e.blockedURI, e.sourceFile))"
    )
    page.on("console", lambda m: violations.append(m.text) if m.text.startswith("CSP ") else None)
    page.on("pageerror", lambda err: violations.append(f"pageerror {err}"))
    return page


def _api(page: Any, url: str, key: str, path: str) -> Any:
    response = page.request.get(f"{url}{path}", headers={"Authorization": f"Bearer {key}"})
    assert response.ok, response.text()
    return response.json()


def test_a_finished_sweep_is_drawn_as_the_api_says(
    served: tuple[Served, Any, InMemoryTracker], browser: Any, tmp_path: Path
) -> None:
    server, app, tracker = served
    job_id, key = seed_sweep(app, tracker, team="nlp", lrs=LRS, lambdas=LAMBDAS, seeds=SEEDS, epochs=EPOCHS)
    violations: list[str] = []
    page = _page(browser, violations)
    sign_in(page, server.url, key)
    assert job_id in page.inner_text("#jobs-table")
    page.screenshot(path=str(tmp_path / "jobs.png"), full_page=True)

    page.goto(f"{server.url}/ui/jobs/{job_id}")
    page.wait_for_selector("body[data-ready='1']")
    reveal_charts(page)
    trials = len(LRS) * len(LAMBDAS) * len(SEEDS)
    assert page.get_attribute("#chart-score", "data-points") == str(trials * EPOCHS)
    assert page.get_attribute("#chart-loss", "data-points") == str(trials * EPOCHS)
    api = _api(page, server.url, key, f"/api/v1/jobs/{job_id}")
    assert page.inner_text("#live-state") == api["state"] == "SUCCEEDED"
    assert float(page.inner_text("#live-best")) == pytest.approx(api["best_value"], rel=1e-3)
    # heat map: the default axes are the first two swept ones (lambda_s x learning_rate)
    assert page.get_attribute("#chart-heatmap", "data-cells") == str(len(LRS) * len(LAMBDAS))
    drawn = page.evaluate("document.getElementById('chart-heatmap').data[0].z")
    heat = _api_cookie(page, server.url, f"/ui/data/jobs/{job_id}/heatmap?x=lambda_s&y=learning_rate")
    assert drawn == heat["z"]
    best_scores = sorted(t["best_score"] for t in api["trials"])
    lines = page.evaluate("document.getElementById('chart-parallel').data[0].dimensions.at(-1).values")
    assert sorted(lines) == pytest.approx(best_scores)
    assert int(page.get_attribute("#chart-regularizer", "data-points") or 0) == trials * EPOCHS
    page.screenshot(path=str(tmp_path / "job.png"), full_page=True)

    page.check("input[name=trial][value=trial_0001]")
    page.check("input[name=trial][value=trial_0012]")
    page.click("#compare-form button[type=submit]")
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("table.compare tr.differs").count() >= 2  # lambda_s, learning_rate, seed differ
    assert page.get_attribute("#chart-compare-score", "data-points") == str(2 * EPOCHS)
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)

    page.goto(f"{server.url}/ui/pool")
    assert "Usage by team" in page.content()
    page.screenshot(path=str(tmp_path / "pool.png"), full_page=True)
    blocking = [v for v in violations if "script-src" in v or "pageerror" in v]
    assert not blocking, blocking


def _api_cookie(page: Any, url: str, path: str) -> Any:
    response = page.request.get(f"{url}{path}")  # the page's own session cookie
    assert response.ok, response.text()
    return response.json()


def test_a_running_sweeps_curve_gains_a_point_without_a_reload(
    served: tuple[Served, Any, InMemoryTracker], browser: Any
) -> None:
    server, app, tracker = served
    job_id, key = seed_sweep(
        app, tracker, team="nlp", lrs=LRS[:1], lambdas=LAMBDAS[:2], seeds=[1], epochs=2, state="RUNNING"
    )
    page = _page(browser, [])
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/ui/jobs/{job_id}")
    page.wait_for_selector("body[data-ready='1']")
    assert page.get_attribute("#chart-score", "data-points") == "4"
    page.evaluate("window.__sameDocument = true")
    tracker.histories[job_id]["trial_0001"]["score"].append((3, 0.7))
    page.wait_for_selector("#chart-score[data-points='5']", timeout=20_000)  # the page polls every 5 s
    assert page.evaluate("window.__sameDocument") is True  # no reload happened


def test_another_team_cannot_open_the_job_or_its_data(
    served: tuple[Served, Any, InMemoryTracker], browser: Any
) -> None:
    server, app, tracker = served
    job_id, _key = seed_sweep(app, tracker, team="nlp", lrs=LRS, lambdas=LAMBDAS[:1], seeds=[1], epochs=2)
    _other_job, other_key = seed_sweep(
        app, tracker, team="vision", lrs=LRS, lambdas=LAMBDAS[:1], seeds=[1], epochs=2
    )
    page = _page(browser, [])
    sign_in(page, server.url, other_key)
    response = page.goto(f"{server.url}/ui/jobs/{job_id}")
    assert response is not None and response.status == 404
    for path in ("curves?key=score", "heatmap?x=lambda_s&y=learning_rate", "parallel", "status"):
        assert page.request.get(f"{server.url}/ui/data/jobs/{job_id}/{path}").status == 404
    page.goto(f"{server.url}/ui/jobs")
    assert job_id not in page.content()


@pytest.mark.slow
def test_a_real_tiny_sweep_and_its_audit_in_the_browser(server: Any, browser: Any, tmp_path: Path) -> None:
    """The real path end to end: `smartune serve` (uvicorn, Ray, the MLflow store), a tiny SMART sweep of
    a 2 x 2 grid that really trains, its page drawn from MLflow's metric histories, then an audit started
    from the page's button that re-runs the best trial and reports PASS; another team's key opens neither
    the job nor the audit."""
    from tests.integration.client import FINAL, Api, tiny_spec

    admin = Api(server, server.admin_key())
    team_key, other_key = admin.team_key("nlp"), admin.team_key("vision")
    api = Api(server, team_key)
    axes = {
        "learning_rate": {"type": "grid", "values": [1e-4, 5e-4]},
        "lambda_s": {"type": "grid", "values": [1.0, 3.0]},
    }
    spec = tiny_spec(training={"epochs": 2, "batch_size": 8, "max_seq_length": 32, "max_train_samples": 32,
                               "max_eval_samples": 16}, search_space={"axes": axes})  # fmt: skip
    job = api.wait(api.submit(spec), lambda j: j["state"] in FINAL, timeout=300)
    assert job["state"] == "SUCCEEDED", job["message"]

    violations: list[str] = []
    page = _page(browser, violations)
    sign_in(page, server.url, team_key)
    page.goto(f"{server.url}/ui/jobs/{job['id']}")
    page.wait_for_selector("body[data-ready='1']")
    reveal_charts(page)
    assert page.get_attribute("#chart-score", "data-points") == str(4 * 2)  # trials x epochs, from MLflow
    assert page.get_attribute("#chart-heatmap", "data-cells") == "4"
    assert float(page.inner_text("#live-best")) == pytest.approx(job["best_value"], rel=1e-3)
    page.screenshot(path=str(tmp_path / "real-job.png"), full_page=True)

    with page.expect_navigation():
        page.click("#audits button[type=submit]")  # "Audit the best trial": to the audit's own page
    audit_url = page.url
    assert audit_url.startswith(f"{server.url}/ui/jobs/job-") and job["id"] not in audit_url
    page.wait_for_selector(".verdict", timeout=240_000)  # the page refreshes itself until the report
    assert page.inner_text("h1 .verdict") == "PASS", page.inner_text("main")
    page.screenshot(path=str(tmp_path / "real-audit.png"), full_page=True)
    assert not [v for v in violations if "script-src" in v or "pageerror" in v], violations

    other = _page(browser, [])
    sign_in(other, server.url, other_key)
    for url in (f"{server.url}/ui/jobs/{job['id']}", audit_url):
        response = other.goto(url)
        assert response is not None and response.status == 404, url

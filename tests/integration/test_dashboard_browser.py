"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright's Python package
(`executable_path` at the system Chromium; never `playwright install`). Skips, saying why, where Chromium
or Playwright is missing (`.ci/run` installs Chromium).

The app runs under uvicorn in a thread (bench/served_sweep.py) with an in-memory tracker. Checks
what is drawn against the API: as many heat-map cells as grid cells, as many curve points as trials x
epochs, the numbers shown equal to the API's; a legend entry per cell named by its values, each cell's
mean ± std band, the seeds on request, log axes where values span decades (and the toggles), the seed in
the parallel coordinates, colour bars spanning their data; a sweep before its first epoch says so on
every chart; on a running sweep a curve gains a point without a reload; the jobs table fits 800 px;
another team's key cannot open the job page or its data; no Content-Security-Policy violation blocks a
script. A screenshot of each page is saved under the test's tmp_path, and with SMARTUNE_SCREENSHOTS=1
also as the docs' pictures (docs/img/dashboard-*.png, docs/dashboard.md).
"""

from __future__ import annotations

import math
import os
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

# 3 x 3 cells of 3 seeds; the learning rates span a decade and more (a log axis), lambda_s does not
LRS, LAMBDAS, SEEDS, EPOCHS = [1e-5, 3e-5, 1e-4], [1.0, 3.0, 5.0], [1, 2, 3], 5
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


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


def _page(browser: Any, violations: list[str], width: int = 1280, height: int = 860) -> Any:
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "console.log('CSP', e.violatedDirective, e.blockedURI, e.sourceFile))"
    )
    page.on("console", lambda m: violations.append(m.text) if m.text.startswith("CSP ") else None)
    page.on("pageerror", lambda err: violations.append(f"pageerror {err}"))
    return page


def _audited(app: Any, job_id: str, verdict: str) -> str:
    """An audit of the job's best trial, queued as the page's button does and ended with `verdict` as the
    engine records an audit's report (service.engine.outcomes.record_audit); its id."""
    from service import audits
    from service.engine.outcomes import record_audit
    from service.schemas import AuditRequest
    from service.store import crud

    with app.state.db.write_sessions() as session:
        job = crud.get_job(session=session, job_id=job_id, team_id=None)
        audit = audits.submit_audit(
            session=session, settings=app.state.settings, job=job, request=AuditRequest()
        )
        report = {"job_id": audit.id, "audit_of": job_id, "verdict": verdict,
                  "trials": [{"verdict": verdict, "reason": "every epoch's metrics equal"}]}  # fmt: skip
        record_audit(session, audit, report)
        session.commit()
        return str(audit.id)


def _shot(page: Any, tmp_path: Path, name: str, **options: Any) -> None:
    """A screenshot under tmp_path; with SMARTUNE_SCREENSHOTS=1 also the docs' picture of that name."""
    page.screenshot(path=str(tmp_path / name), **options)
    if os.environ.get("SMARTUNE_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS_IMG / f"dashboard-{name}"), **options)


def _traces(page: Any, chart: str) -> list[dict[str, Any]]:
    """The chart's traces as Plotly holds them (gd.data), the fields the checks read."""
    return list(
        page.evaluate(
            f"""document.getElementById('{chart}').data.map((t) => ({{
              name: t.name, meta: t.meta || null, fill: t.fill || null, visible: t.visible === undefined ? true : t.visible,
              x: t.x, y: t.y, showlegend: t.showlegend === undefined ? true : t.showlegend }}))"""
        )
    )


def _legend(page: Any, chart: str) -> list[str]:
    """The legend's entries as drawn (Plotly's SVG)."""
    return list(
        page.eval_on_selector_all(
            f"#{chart} .legend .traces .legendtext", "els => els.map(e => e.textContent)"
        )
    )


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
    audit_id = _audited(app, job_id, "PASS")
    sign_in(page, server.url, key)
    assert job_id in page.inner_text("#jobs-table")
    audit_row = page.locator(f"#jobs-table tr[data-job='{audit_id}']")
    assert audit_row.locator("[data-field='best'] .verdict").inner_text() == "PASS"  # not "–"
    assert audit_row.locator("[data-field='trials']").inner_text() == "audit"  # not "0 / 1"
    _shot(page, tmp_path, "jobs.png")

    page.goto(f"{server.url}/ui/jobs/{job_id}")
    page.wait_for_selector("body[data-ready='1']")
    # the header and the learning curves with their legend
    bottom = page.evaluate(
        "document.getElementById('chart-score').closest('section').getBoundingClientRect().bottom"
    )
    _shot(
        page, tmp_path, "job.png", full_page=True, clip={"x": 0, "y": 0, "width": 1280, "height": bottom + 12}
    )
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
    page.evaluate("document.getElementById('chart-heatmap').closest('section').scrollIntoView()")
    _shot(page, tmp_path, "job-grid.png")
    page.screenshot(path=str(tmp_path / "job-full.png"), full_page=True)

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


def test_the_charts_read_without_hovering(served: tuple[Served, Any, InMemoryTracker], browser: Any) -> None:
    """A legend entry per cell named by its values; each cell's mean and ± std band equal to the API's;
    the seeds on request, each named with its seed; log axes where values span decades, and the toggles;
    the seed among the parallel coordinates; colour bars spanning exactly their data."""
    server, app, tracker = served
    job_id, key = seed_sweep(app, tracker, team="nlp", lrs=LRS, lambdas=LAMBDAS, seeds=SEEDS, epochs=EPOCHS)
    violations: list[str] = []
    page = _page(browser, violations)
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/ui/jobs/{job_id}")
    page.wait_for_selector("body[data-ready='1']")
    reveal_charts(page)
    api = _api_cookie(
        page, server.url, f"/ui/data/jobs/{job_id}/curves?key=score&key=train_loss&max_points=200"
    )
    cells = {c["label"]: c for c in api["cells"]}
    assert len(cells) == len(LRS) * len(LAMBDAS)

    # the legend: one entry per cell, named by its values (Plotly's drawn SVG)
    legend = _legend(page, "chart-score")
    assert sorted(legend) == sorted(cells)
    assert "lambda_s=1 learning_rate=1e-5" in legend
    # the bands: one filled outline per cell, mean + std forward and mean - std back
    traces = _traces(page, "chart-score")
    bands = {t["name"][: -len(" ± std")]: t for t in traces if t["meta"] == "band"}
    assert set(bands) == set(cells) and all(t["fill"] == "toself" for t in bands.values())
    rows = cells["lambda_s=3 learning_rate=3e-5"]["bands"]["score"]
    band = bands["lambda_s=3 learning_rate=3e-5"]
    assert band["y"][: len(rows)] == pytest.approx([mean + std for _e, mean, std, _n in rows])
    assert band["y"][len(rows) :] == pytest.approx([mean - std for _e, mean, std, _n in reversed(rows)])
    means = {t["name"]: t for t in traces if t["meta"] == "mean"}
    assert means["lambda_s=3 learning_rate=3e-5"]["y"] == pytest.approx([r[1] for r in rows])
    # each seed: hidden until asked for, then drawn, named with its cell and seed
    seeds = [t for t in traces if t["meta"] == "seed"]
    assert len(seeds) == len(LRS) * len(LAMBDAS) * len(SEEDS) and not any(t["visible"] is True for t in seeds)
    page.check("#curves-seeds")
    page.wait_for_function(
        "document.getElementById('chart-score').data.some(t => t.meta === 'seed' && t.visible === true)"
    )
    shown = [t["name"] for t in _traces(page, "chart-score") if t["meta"] == "seed" and t["visible"] is True]
    assert len(shown) == len(seeds) and "lambda_s=1 learning_rate=1e-5 seed=2" in shown

    # log axes: the score stays linear; a regulariser term falling over decades starts logarithmic
    assert page.evaluate("document.getElementById('chart-score').layout.yaxis.type") == "linear"
    page.select_option("#regularizer-key", "train_d_breg")
    page.wait_for_function("document.getElementById('chart-regularizer').layout.yaxis.type === 'log'")
    assert page.is_checked('.log-toggle[data-chart="chart-regularizer"]')
    page.uncheck('.log-toggle[data-chart="chart-regularizer"]')  # the reader's choice wins
    page.wait_for_function("document.getElementById('chart-regularizer').layout.yaxis.type === 'linear'")
    page.check('.log-toggle[data-chart="chart-score"]')
    page.wait_for_function("document.getElementById('chart-score').layout.yaxis.type === 'log'")

    # parallel coordinates: the seed is a dimension; the learning rate (1e-5..1e-4) on a log axis
    dims = page.evaluate(
        "document.getElementById('chart-parallel').data[0].dimensions.map(d => [d.label, d.values])"
    )
    labels = [d[0] for d in dims]
    assert labels == ["lambda_s", "learning_rate (log)", "seed", "score"]
    parallel = _api_cookie(page, server.url, f"/ui/data/jobs/{job_id}/parallel")
    raw = {d["label"]: d["values"] for d in parallel["dimensions"]}
    assert dims[1][1] == pytest.approx([math.log10(v) for v in raw["learning_rate"]])
    assert sorted(dims[2][1]) == sorted(raw["seed"]) and set(raw["seed"]) == set(SEEDS)
    page.uncheck("#parallel-log input[name=learning_rate]")
    page.wait_for_function(
        "document.getElementById('chart-parallel').data[0].dimensions[1].label === 'learning_rate'"
    )
    # colour bars span their data: the scores' range on the lines, the cells' means on the heat map
    line = page.evaluate("document.getElementById('chart-parallel').data[0].line")
    assert [line["cmin"], line["cmax"]] == pytest.approx([min(raw["score"]), max(raw["score"])])
    heat = page.evaluate(
        "(() => { const t = document.getElementById('chart-heatmap').data[0]; return [t.zmin, t.zmax, t.z]; })()"
    )
    z = [v for row in heat[2] for v in row if v is not None]
    assert heat[:2] == pytest.approx([min(z), max(z)])
    assert not [v for v in violations if "script-src" in v or "pageerror" in v], violations


def test_many_cells_are_drawn_as_one_band_and_one_mean_trace(
    served: tuple[Served, Any, InMemoryTracker], browser: Any
) -> None:
    """Past 24 cells: every band one trace with gaps, every mean another, the best cell on top by name."""
    server, app, tracker = served
    lrs, lambdas = [1e-5, 2e-5, 3e-5, 5e-5, 8e-5], [0.0, 1.0, 3.0, 5.0, 10.0]
    job_id, key = seed_sweep(app, tracker, team="nlp", lrs=lrs, lambdas=lambdas, seeds=[1, 2], epochs=3)
    page = _page(browser, [])
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/ui/jobs/{job_id}")
    page.wait_for_selector("body[data-ready='1']")
    traces = _traces(page, "chart-score")
    assert [t["meta"] for t in traces] == ["band", "mean", "seed", "mean"]
    band, means, seeds, best = traces
    assert band["fill"] == "toself" and band["x"].count(None) == 25  # one closed outline per cell
    assert means["x"].count(None) == 25 and seeds["visible"] is False and seeds["x"].count(None) == 50
    assert best["name"].startswith("best cell: lambda_s=")
    assert sorted(_legend(page, "chart-score")) == sorted(
        t["name"] for t in (band, means, best)
    )  # seeds: hidden
    assert page.get_attribute("#chart-score", "data-points") == str(50 * 3)


def test_a_sweep_before_its_first_epoch_says_so_on_every_chart(
    served: tuple[Served, Any, InMemoryTracker], browser: Any
) -> None:
    server, app, tracker = served
    job_id, key = seed_sweep(
        app,
        tracker,
        team="nlp",
        lrs=LRS[:2],
        lambdas=LAMBDAS[:2],
        seeds=[1],
        epochs=3,
        state="RUNNING",
        logged=0,
    )
    violations: list[str] = []
    page = _page(browser, violations)
    sign_in(page, server.url, key)
    page.goto(f"{server.url}/ui/jobs/{job_id}")
    page.wait_for_selector("body[data-ready='1']")
    reveal_charts(page)
    for chart in ("chart-score", "chart-loss", "chart-regularizer", "chart-heatmap", "chart-parallel"):
        text = page.inner_text(f"#{chart} .chart-empty")
        assert text.startswith("Waiting for the first"), (chart, text)
        assert page.locator(f"#{chart} .main-svg").count() == 0, chart  # no bare axes
    tracker.histories[job_id]["trial_0001"]["score"].append((1, 0.61))
    page.wait_for_selector("#chart-score[data-empty='0']", timeout=20_000)  # the page polls every 5 s
    assert page.get_attribute("#chart-score", "data-points") == "1"
    assert page.locator("#chart-score .chart-empty").count() == 0
    assert page.locator("#chart-loss .chart-empty").count() == 1  # still no training loss
    assert not [v for v in violations if "script-src" in v or "pageerror" in v], violations


def test_the_jobs_table_fits_800_pixels(served: tuple[Served, Any, InMemoryTracker], browser: Any) -> None:
    server, app, tracker = served
    _job, key = seed_sweep(app, tracker, team="nlp", lrs=LRS[:1], lambdas=LAMBDAS[:1], seeds=[1], epochs=2)
    page = _page(browser, [], width=800, height=700)
    sign_in(page, server.url, key)
    assert page.evaluate("document.documentElement.scrollWidth") <= 800
    table = page.evaluate("document.getElementById('jobs-table').getBoundingClientRect().right")
    assert table <= 800
    assert not page.is_visible("#jobs-table th.low")  # team, submitted, started: hidden, not squeezed
    assert page.is_visible("#jobs-table [data-field='best']")


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

"""The editor of "new job from this spec" (service/dashboard/editor.py): it is prefilled with the job's spec;
`check` validates as a submission does and shows every mistake with its field (and the did-you-mean
hint) or the plan; `submit` queues one job per form token; admin keys check but cannot submit; another
team's job is a 404; the form needs its CSRF token."""

from __future__ import annotations

import re

import yaml
from fastapi.testclient import TestClient

from service.engine.rounds import Engine
from tests.service.dashboard_utils import csrf_of, logged_in, sweep
from tests.service.fakes import FakeRay, FakeTracker

TOKEN = re.compile(r'name="token" value="([^"]+)"')
TEXTAREA = re.compile(r"<textarea[^>]*>(.*?)</textarea>", re.S)


def _editor(client: TestClient, job_id: str) -> tuple[str, str, str]:
    """The editor's text (unescaped), CSRF token and form token."""
    page = client.get(f"/ui/jobs/{job_id}/new")
    assert page.status_code == 200, page.text
    found, token = TEXTAREA.search(page.text), TOKEN.search(page.text)
    assert found and token
    text = (
        found.group(1).replace("&#39;", "'").replace("&#34;", '"').replace("&gt;", ">").replace("&lt;", "<")
    )
    return text.replace("&amp;", "&"), csrf_of(page.text), token.group(1)


def _post(client: TestClient, job_id: str, csrf: str, token: str, text: str, action: str) -> object:
    data = {"csrf": csrf, "token": token, "spec": text, "action": action}
    return client.post(f"/ui/jobs/{job_id}/new", data=data, follow_redirects=False)


def test_the_editor_checks_and_submits_an_edited_spec_once(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    logged_in(client, team_key)
    assert f'href="/ui/jobs/{job_id}/new"' in client.get(f"/ui/jobs/{job_id}").text
    text, csrf, token = _editor(client, job_id)
    spec = yaml.safe_load(text)
    stored = client.get(f"/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {team_key}"}).json()[
        "spec"
    ]
    assert spec == stored  # prefilled with the spec as submitted
    spec["name"] = "edited"
    spec["seeds"] = [7]
    edited = yaml.safe_dump(spec, sort_keys=False)

    checked = _post(client, job_id, csrf, token, edited, "check")
    assert checked.status_code == 200 and "The spec is valid" in checked.text  # type: ignore[attr-defined]
    assert "4 trials" in checked.text  # type: ignore[attr-defined]  # 2 x 2 grid, one seed
    assert "edited" in checked.text  # type: ignore[attr-defined]  # the text is kept

    submitted = _post(client, job_id, csrf, token, edited, "submit")
    assert submitted.status_code == 303  # type: ignore[attr-defined]
    new_id = submitted.headers["location"].rsplit("/", 1)[1]  # type: ignore[attr-defined]
    assert new_id != job_id
    again = _post(client, job_id, csrf, token, edited, "submit")  # a double click: the same job
    assert again.headers["location"] == f"/ui/jobs/{new_id}"  # type: ignore[attr-defined]
    new = client.get(f"/api/v1/jobs/{new_id}", headers={"Authorization": f"Bearer {team_key}"}).json()
    assert new["name"] == "edited" and new["spec"]["seeds"] == [7] and new["state"] == "QUEUED"

    json_text = '{"task": "rte", "model": "tiny-random", "method": "vanilla", "seeds": [1]}'  # JSON is YAML
    assert _post(client, job_id, csrf, token, json_text, "check").status_code == 200  # type: ignore[attr-defined]


def test_mistakes_are_shown_beside_their_fields_with_hints(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    logged_in(client, team_key)
    text, csrf, token = _editor(client, job_id)
    spec = yaml.safe_load(text)
    spec["training"]["learnig_rate"] = 1e-4  # misspelt
    spec["training"]["epochs"] = 0  # out of bounds
    typo = _post(client, job_id, csrf, token, yaml.safe_dump(spec), "submit")
    assert typo.status_code == 422  # type: ignore[attr-defined]
    page = typo.text  # type: ignore[attr-defined]
    assert 'data-field="training.learnig_rate"' in page and "did you mean" in page
    assert "training.learning_rate" in page and 'data-field="training.epochs"' in page
    assert "learnig_rate: 0.0001" in page  # the text is kept for fixing

    not_yaml = _post(client, job_id, csrf, token, "task: rte\n  model: [", "check")
    assert not_yaml.status_code == 422 and "line 2" in not_yaml.text  # type: ignore[attr-defined]
    a_list = _post(client, job_id, csrf, token, "- rte", "check")
    assert a_list.status_code == 422 and 'data-field="spec"' in a_list.text  # type: ignore[attr-defined]
    spec = yaml.safe_load(text) | {"seeds": [1, 2, 3, 4, 5, 6]}  # above this deployment's max_seeds (5)
    limits = _post(client, job_id, csrf, token, yaml.safe_dump(spec), "check")
    assert limits.status_code == 422 and 'data-field="seeds"' in limits.text  # type: ignore[attr-defined]
    bad_action = _post(client, job_id, csrf, token, text, "delete")
    assert bad_action.status_code == 422  # type: ignore[attr-defined]
    no_csrf = _post(client, job_id, "nope", token, text, "submit")
    assert no_csrf.status_code == 403  # type: ignore[attr-defined]
    no_token = _post(client, job_id, csrf, "", text, "submit")
    assert no_token.status_code == 422 and 'data-field="token"' in no_token.text  # type: ignore[attr-defined]
    listed = client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {team_key}"}).json()
    assert listed["count"] == 1  # nothing was submitted


def test_admins_check_but_cannot_submit_and_other_teams_see_nothing(
    client: TestClient,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
    team_key: str,
    other_key: str,
    admin_key: str,
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    logged_in(client, admin_key)
    text, csrf, token = _editor(client, job_id)
    assert 'value="submit"' not in client.get(f"/ui/jobs/{job_id}/new").text
    assert _post(client, job_id, csrf, token, text, "check").status_code == 200  # type: ignore[attr-defined]
    refused = _post(client, job_id, csrf, token, text, "submit")
    assert refused.status_code == 403 and "belongs to no team" in refused.text  # type: ignore[attr-defined]

    logged_in(client, other_key)
    assert client.get(f"/ui/jobs/{job_id}/new").status_code == 404
    other_csrf = csrf_of(client.get("/ui/jobs").text)
    assert _post(client, job_id, other_csrf, token, text, "submit").status_code == 404  # type: ignore[attr-defined]

"""`smartune.Client`: the REST API of a running `smartune serve`, as Python calls returning its JSON."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from smartune._http import Http
from smartune.config import key_from_env, server_url
from smartune.errors import SmartuneError
from smartune.specs import read_spec
from smartune.uploads import UploadProgress, dataset_files, multipart
from smartune.webhooks import WebhookCalls

if TYPE_CHECKING:
    import httpx
    import pandas

FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
PAGE = 500  # the API's largest page of jobs

Spec = Mapping[str, Any] | str | os.PathLike[str]
Progress = Callable[[dict[str, Any]], object]


def _seg(value: str) -> str:
    """A path segment: a job id or team name cannot reach another route."""
    return quote(str(value), safe="")


def _states(state: str | Iterable[str] | None) -> list[str]:
    if state is None:
        return []
    return [s.upper() for s in ([state] if isinstance(state, str) else state)]


class Client(WebhookCalls):
    """A client of one smartune server. `url` defaults to $SMARTUNE_URL (else http://127.0.0.1:8000),
    `key` to $SMARTUNE_API_KEY (else the file $SMARTUNE_API_KEY_FILE names). Each call returns the API's
    JSON; a refusal raises SmartuneError (429 and 503 are first tried again after their Retry-After, up
    to `retries` times). Use it as a context manager, or call close().

    `transport` (an httpx transport) or `http` (a ready httpx client, such as FastAPI's TestClient, used
    as it is and not closed; `key`, when given, is sent with each request) let tests reach an app
    without a network. The webhook calls (`add_webhook`, `webhooks`, ...) are in smartune/webhooks.py."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        if key is None and http is None:
            key = key_from_env()
            if key is None:
                raise SmartuneError(
                    None, "no API key: pass key=, or set SMARTUNE_API_KEY (or SMARTUNE_API_KEY_FILE)"
                )
        self.url = server_url(url) if http is None else str(http.base_url).rstrip("/")
        self._http = Http(self.url, key, timeout=timeout, retries=retries, transport=transport, http=http)

    def __repr__(self) -> str:
        return f"smartune.Client({self.url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self._http.request("GET", path, params=clean or None).json()

    # --- jobs -------------------------------------------------------------------------------------------

    def submit_job(self, spec: Spec, idempotency_key: str | None = None) -> dict[str, Any]:
        """Submit a job spec (a mapping, or the path of a YAML/JSON file) and return the server's answer:
        the job, `replayed` (the Idempotency-Key matched an earlier submission) and `identical_jobs`."""
        document = spec if isinstance(spec, Mapping) else read_spec(spec)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        answer: dict[str, Any] = self._http.request("POST", "/jobs", json=document, headers=headers).json()
        return answer

    def estimate(self, spec: Spec) -> dict[str, Any]:
        """What submitting `spec` would cost, nothing created (`POST /jobs?dry_run=true`): trials after
        deduplication, examples per epoch, device-hours, wall time, ASHA's expected saving and the team's
        budget (`budget.fits`, `budget.refusal`). A spec the server would refuse raises as a submission does."""
        document = spec if isinstance(spec, Mapping) else read_spec(spec)
        answer: dict[str, Any] = self._http.request(
            "POST", "/jobs", json=document, params={"dry_run": "true"}
        ).json()
        return answer

    def submit(self, spec: Spec, idempotency_key: str | None = None) -> str:
        """Submit a job spec (a mapping, or the path of a YAML/JSON file); return the job's id. With an
        `idempotency_key`, submitting again returns the same job."""
        return str(self.submit_job(spec, idempotency_key)["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        """A job in detail: state, progress, trials (params, best score, metrics, MLflow run), attempts,
        transitions, the spec."""
        job: dict[str, Any] = self._get(f"/jobs/{_seg(job_id)}")
        return job

    def jobs_page(
        self, state: str | Iterable[str] | None = None, *, limit: int = 50, offset: int = 0
    ) -> dict[str, Any]:
        """One page of the team's jobs, newest first: `{"data": [...], "count": <all matching>}`."""
        page: dict[str, Any] = self._get("/jobs", state=_states(state) or None, limit=limit, offset=offset)
        return page

    def jobs(
        self, state: str | Iterable[str] | None = None, *, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The team's jobs (every team's for an admin key), newest first, optionally only those in
        `state` (one or several); all of them, or the first `limit`."""
        out: list[dict[str, Any]] = []
        while limit is None or len(out) < limit:
            size = PAGE if limit is None else min(PAGE, limit - len(out))
            page = self.jobs_page(state, limit=size, offset=len(out))
            out.extend(page["data"])
            if not page["data"] or len(out) >= page["count"]:
                break
        return out

    def wait(
        self,
        job_id: str,
        timeout: float | None = None,
        poll_s: float = 2.0,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Poll the job every `poll_s` seconds until it is SUCCEEDED, FAILED or CANCELLED, and return it
        (a failed job is returned, not raised: look at its `state` and `message`). `progress` is called
        with the job at each poll. TimeoutError after `timeout` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if progress is not None:
                progress(job)
            if job["state"] in FINAL_STATES:
                return job
            pause = poll_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} is still {job['state']} after {timeout:g} s")
                pause = min(poll_s, left)
            time.sleep(pause)

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job (a running one is stopped, its MLflow runs KILLED); return it."""
        job: dict[str, Any] = self._http.request("POST", f"/jobs/{_seg(job_id)}/cancel").json()
        return job

    def retry(self, job_id: str) -> dict[str, Any]:
        """Queue a FAILED job again; its next attempt resumes from its checkpoints. Return it."""
        job: dict[str, Any] = self._http.request("POST", f"/jobs/{_seg(job_id)}/retry").json()
        return job

    def logs(self, job_id: str, attempt: int | None = None, tail: int | None = None) -> str:
        """The sweep driver's output (the latest attempt's unless `attempt`; the last `tail` lines)."""
        params = {k: v for k, v in {"attempt": attempt, "tail": tail}.items() if v is not None}
        return self._http.request("GET", f"/jobs/{_seg(job_id)}/logs", params=params or None).text

    def results(self, job_id: str) -> dict[str, Any]:
        """The sweep summary of a SUCCEEDED job: cells (mean and std over seeds), the best trial."""
        summary: dict[str, Any] = self._get(f"/jobs/{_seg(job_id)}/results")
        return summary

    def audit(
        self, job_id: str, trials: Iterable[str] | None = None, tolerance: float | None = None
    ) -> dict[str, Any]:
        """Queue an audit of a SUCCEEDED job: re-run `trials` (Tune trial ids; default: the best one) from
        their MLflow records and compare every per-epoch metric (exactly on CPU, else within `tolerance`).
        Returns the audit, a job of kind `audit`: `wait(audit["id"])`, then `results(audit["id"])` is
        its report (a verdict PASS, FAIL or NOT-COMPARABLE per trial, with the reason)."""
        body: dict[str, Any] = {}
        if trials is not None:
            body["trials"] = list(trials)
        if tolerance is not None:
            body["tolerance"] = tolerance
        audit: dict[str, Any] = self._http.request("POST", f"/jobs/{_seg(job_id)}/audits", json=body).json()
        return audit

    def audits(self, job_id: str) -> list[dict[str, Any]]:
        """The job's audits, newest first (each a job of kind `audit`)."""
        listed: list[dict[str, Any]] = self._get(f"/jobs/{_seg(job_id)}/audits")["data"]
        return listed

    def trials_frame(self, job_id: str) -> pandas.DataFrame:
        """The job's trials as a pandas DataFrame: one row per trial (index `trial_id`), its swept
        parameters as columns, then state, attempt, best_score, last_epoch, error_class, mlflow_run_id and
        the latest value of each metric (`metrics.<name>`). Needs pandas."""
        from smartune.frames import trials_frame

        return trials_frame(self.job(job_id)["trials"])

    # --- datasets -------------------------------------------------------------------------------------

    def push_dataset(
        self,
        path: str | os.PathLike[str],
        name: str,
        task: str,
        description: str | None = None,
        progress: UploadProgress | None = None,
    ) -> dict[str, Any]:
        """Upload a dataset: a file, or a folder's table files (train.tsv, dev.tsv, ...; test splits are
        skipped). The server reads every row as training will (a bad one is refused, naming file, line and
        column) and stores the files by content. Returns the version: `digest`, `version`, `rows`, and
        `created` (false: the same content was the latest version already). `progress(sent, total)`."""
        chosen, _skipped = dataset_files(path)
        fields = {"name": name, "task": task, **({"description": description} if description else {})}
        content_type, length, body = multipart(fields, chosen, progress)
        headers = {"Content-Type": content_type, "Content-Length": str(length)}
        answer: dict[str, Any] = self._http.request("POST", "/datasets", content=body, headers=headers).json()
        return answer

    def datasets(self) -> list[dict[str, Any]]:
        """The datasets the key may read (its team's and the published ones), each at its latest version."""
        return list(self._get("/datasets")["data"])

    def dataset(self, name: str, version: int | None = None, team: str | None = None) -> dict[str, Any]:
        """One version (`version`), else every version the key may read (`data`, oldest first). `NAME@V`
        is accepted as `name`. `team`: the owner, where two teams use one name (admins)."""
        if version is None and "@" in name:
            name, _, number = name.rpartition("@")
            version = int(number)
        path = f"/datasets/{_seg(name)}" + (f"/{int(version)}" if version is not None else "")
        found: dict[str, Any] = self._get(path, team=team)
        return found

    def publish_dataset(self, name: str, version: int, team: str | None = None) -> dict[str, Any]:
        """Let every team read this version (an admin key)."""
        params = {"team": team} if team else None
        path = f"/datasets/{_seg(name)}/{int(version)}/publish"
        published: dict[str, Any] = self._http.request("POST", path, params=params).json()
        return published

    def delete_dataset(self, name: str, version: int, team: str | None = None) -> dict[str, Any]:
        """Delete a version (refused while an unfinished job reads it); return what was deleted."""
        params = {"team": team} if team else None
        path = f"/datasets/{_seg(name)}/{int(version)}"
        deleted: dict[str, Any] = self._http.request("DELETE", path, params=params).json()
        return deleted

    def models(self, team: str | None = None) -> list[dict[str, Any]]:
        """The team's registered models, one per task (`smartune-<team>-<task>`): name, task, latest
        version, the version the alias `best` names with its dev score, metric and job. `team`: admins."""
        return list(self._get("/models", team=team)["data"])

    # --- the pool, teams, keys ------------------------------------------------------------------------

    def pool(self) -> dict[str, Any]:
        """The pool's capacity, what is reserved and free, and the teams' usage."""
        pool: dict[str, Any] = self._get("/pool")
        return pool

    def queue(self) -> list[dict[str, Any]]:
        """The queue in the scheduler's order, with each job's reason for waiting."""
        return list(self._get("/pool/queue")["data"])

    def whoami(self) -> dict[str, Any]:
        """The calling key: `key_id`, `team`, `is_admin`."""
        me: dict[str, Any] = self._get("/keys/me")
        return me

    def teams(self) -> list[dict[str, Any]]:
        """The teams with their quotas (an admin key)."""
        return list(self._get("/teams")["data"])

    def team_keys(self, team: str) -> list[dict[str, Any]]:
        """A team's API keys: ids, names, dates; never the keys (an admin key)."""
        return list(self._get(f"/teams/{_seg(team)}/keys")["data"])

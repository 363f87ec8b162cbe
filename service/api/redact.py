"""What a tenant may see of the server: no tracking URI, no server paths, no driver log tails.

The store keeps everything (admins read it all); a team's key gets views with the server's insides taken
out. A sweep summary is rebuilt from the fields a tenant needs (run ids, cells, metrics), so a field added
to it later stays private until it is listed here. Error texts keep their first line (the reason), cut
before a log tail, with absolute paths, URIs (which may carry database credentials) and IPv4 addresses
(the nodes') replaced. A job's logs are scrubbed the same way, line by line (`tenant_logs`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

LOG_TAIL_MARKERS = (
    "\n--- last lines of the driver's log ---",  # service/engine/watch.py appends the driver's last lines
    "last available logs",  # Ray's own message for a failed entrypoint quotes its logs after this
)
MAX_TEXT = 500

_URI = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
_PATH = re.compile(r"(?<![\w.~/-])(?:~|/)(?:[^\s'\",;:()\[\]{}]*)")
_ANSI = re.compile(r"(\x1b\[[0-9;]*[A-Za-z])")  # a terminal escape (colour) sequence, captured by split
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?!\w|\.\d)")  # not inside 1.2.3.4.5 or v1.2.3.4

_SUMMARY_KEYS = (
    "job_id", "parent_run_id", "main_metric", "trials_by_state", "cells", "best", "errors", "registered_model",
    "registered_models", "tasks",
)  # fmt: skip
# The registry entry (worker.tune.registration): this job's version of the team's model of the task, where
# its alias `best` is and why; the error and the note scrubbed.
_REGISTERED_KEYS = ("name", "alias", "version", "uri", "best_version", "best_uri", "alias_moved", "alias_note",
                    "dev_score", "error")  # fmt: skip
_CELL_KEYS = ("params", "n", "mean", "std", "trial_ids")
_BEST_KEYS = ("params", "value", "run_id", "trial_id", "tasks")
# A multitask job's per-task result (worker.tune.summary): over the job (`tasks`) or the best trial's own
# (`best.tasks`); the first also names its trial and, once registered, the task's registered model.
_TASK_KEYS = ("value", "stage", "epoch", "trial_id", "run_id", "seed", "registered_model")
_ERROR_KEYS = ("trial_id", "run_id", "error_class", "error")  # why a trial failed; its text scrubbed


def _scrub_plain(text: str) -> str:
    text = _URI.sub("<uri>", text)
    text = _PATH.sub(lambda m: "<path>" if len(m.group(0)) > 1 else m.group(0), text)
    return _IPV4.sub("<ip>", text)


def scrub(text: str) -> str:
    """Replace URIs, absolute paths (`/srv/x`, `~/x`) and IPv4 addresses in `text`. Terminal colour codes
    are kept and the text between them scrubbed on its own (Ray colours the URL in `...[32mhttp://host`)."""
    parts = _ANSI.split(text)  # text, code, text, ...: the codes at odd indices
    return "".join(part if i % 2 else _scrub_plain(part) for i, part in enumerate(parts))


def _scrub_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {scrub(str(k)): _scrub_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_json(v) for v in value]
    return scrub(value) if isinstance(value, str) else value


def _log_line(line: str) -> str:
    """One line of a log, scrubbed; a JSON object (the driver's summary line) stays valid JSON."""
    if line.startswith("{") and line.endswith("}"):
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return json.dumps(_scrub_json(parsed))  # the driver's own separators: only values change
    return scrub(line)


def tenant_logs(text: str) -> str:
    """A job's logs as a tenant sees them: every line scrubbed (the driver's summary names the tracking
    URI and checkpoint paths, Ray's lines the node's address, tracebacks the venv); line breaks kept."""
    lines = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        lines.append(_log_line(body) + line[len(body) :])
    return "".join(lines)


def tenant_text(text: str | None) -> str | None:
    """An error text as a tenant sees it: the reason, without the log tail or the server's paths."""
    if text is None:
        return None
    for marker in LOG_TAIL_MARKERS:
        text = text.split(marker, 1)[0]
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = scrub(first).rstrip(" ,:(")
    return first[:MAX_TEXT] + ("..." if len(first) > MAX_TEXT else "")


def _params(params: Any) -> Any:
    if not isinstance(params, Mapping):
        return params
    return {k: scrub(v) if isinstance(v, str) else v for k, v in params.items()}


def _pick(source: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(source, Mapping):
        return {}
    picked = {k: source[k] for k in keys if k in source}
    if "params" in picked:
        picked["params"] = _params(picked["params"])
    return picked


def _registered(entry: Any) -> Any:
    if not isinstance(entry, Mapping):
        return entry
    out = _pick(entry, _REGISTERED_KEYS)
    for text in ("error", "alias_note"):
        if isinstance(out.get(text), str):
            out[text] = tenant_text(out[text])
    return out


def _tasks(tasks: Any) -> dict[str, Any]:
    """task -> its result, as listed in _TASK_KEYS (a task's registered model as the job's)."""
    if not isinstance(tasks, Mapping):
        return {}
    out = {}
    for name, result in tasks.items():
        picked = _pick(result, _TASK_KEYS)
        if "registered_model" in picked:
            picked["registered_model"] = _registered(picked["registered_model"])
        out[str(name)] = picked
    return out


def public_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep summary without `tracking_uri`, checkpoint locations or anything not listed above."""
    out = _pick(summary, _SUMMARY_KEYS)
    if isinstance(out.get("cells"), list):
        out["cells"] = [_pick(cell, _CELL_KEYS) for cell in out["cells"]]
    if out.get("best") is not None:
        out["best"] = _pick(out["best"], _BEST_KEYS)
        if "tasks" in out["best"]:
            out["best"]["tasks"] = _tasks(out["best"]["tasks"])
    if "registered_model" in out:
        out["registered_model"] = _registered(out["registered_model"])
    if "registered_models" in out:  # a grid over several tasks: one entry each
        models = out["registered_models"]
        out["registered_models"] = (
            {str(t): _registered(r) for t, r in models.items()} if isinstance(models, Mapping) else {}
        )
    if "tasks" in out:
        out["tasks"] = _tasks(out["tasks"])
    if isinstance(out.get("errors"), list):
        out["errors"] = [_pick(e, _ERROR_KEYS) for e in out["errors"]]
        for error in out["errors"]:
            if isinstance(error.get("error"), str):
                error["error"] = tenant_text(error["error"])
    return out


_AUDIT_KEYS = ("job_id", "audit_of", "verdict", "trials")
_AUDITED_TRIAL_KEYS = ("run_id", "epochs", "tolerance", "exact", "verdict", "reason", "metrics", "provenance")
_AUDIT_METRIC_KEYS = ("epoch", "metric", "recorded", "rerun", "match")
_AUDIT_FIELD_KEYS = ("field", "recorded", "now", "same")


def public_audit(report: Mapping[str, Any]) -> dict[str, Any]:
    """An audit report (worker.tune.audit) as listed above; reasons scrubbed (a data path is the server's)."""
    out = _pick(report, _AUDIT_KEYS)
    trials = []
    for trial in out.get("trials") or []:
        picked = _pick(trial, _AUDITED_TRIAL_KEYS)
        picked["reason"] = tenant_text(picked.get("reason"))
        picked["metrics"] = [_pick(m, _AUDIT_METRIC_KEYS) for m in picked.get("metrics") or []]
        picked["provenance"] = [_pick(p, _AUDIT_FIELD_KEYS) for p in picked.get("provenance") or []]
        trials.append(picked)
    out["trials"] = trials
    return out

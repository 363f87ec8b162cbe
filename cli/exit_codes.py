"""The exit status of every `smartune` command: one table, so a script can tell a missing job from an
unreachable server from a job that failed (docs/cli.md prints it; `python -m cli.exit_codes` writes it).

`cli.main` maps every error a command raises through `for_error`; a command itself returns only OK,
JOB_NOT_SUCCEEDED (it followed a job to its end, and the job did not succeed) or NO_TRIAL_COMPLETED.
"""

from __future__ import annotations

import enum

from smartune.errors import ServerUnreachable, SmartuneError


class ExitCode(enum.IntEnum):
    OK = 0
    JOB_NOT_SUCCEEDED = 1
    USAGE = 2
    NO_TRIAL_COMPLETED = 3
    UNAUTHORISED = 4
    NOT_FOUND = 5
    CONFLICT = 6
    REJECTED = 7
    UNREACHABLE = 8
    SERVER_ERROR = 9
    INTERRUPTED = 130


MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "done (a followed job SUCCEEDED, an audit PASSed)",
    ExitCode.JOB_NOT_SUCCEEDED: "the job (`status --watch`, `audit --wait`) ended FAILED, CANCELLED or LOST, "
    "or the audit did not PASS",
    ExitCode.USAGE: "a usage error: a bad flag or argument, an unreadable or invalid local file (a spec, a "
    "key file), no API key",
    ExitCode.NO_TRIAL_COMPLETED: "`smartune sweep`: the sweep ran but no trial completed",
    ExitCode.UNAUTHORISED: "the server refused the key (HTTP 401 or 403): none, unknown, revoked, or not "
    "allowed to do this (an admin-only call, a key of no team)",
    ExitCode.NOT_FOUND: "no such job, team, dataset, key or webhook (HTTP 404)",
    ExitCode.CONFLICT: "not in this state (HTTP 409): retrying a job that is not FAILED, a name taken",
    ExitCode.REJECTED: "the server rejected the input (HTTP 422, or any other 4xx: too large, rate limited "
    "after the retries)",
    ExitCode.UNREACHABLE: "no answer from the server (not running, wrong --url, network down)",
    ExitCode.SERVER_ERROR: "the server failed (HTTP 5xx, or 503 still after the retries)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}

_BY_STATUS = {401: ExitCode.UNAUTHORISED, 403: ExitCode.UNAUTHORISED, 404: ExitCode.NOT_FOUND,
              409: ExitCode.CONFLICT}  # fmt: skip


def for_status(status: int) -> ExitCode:
    """The exit code of an HTTP error status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ExitCode.SERVER_ERROR if status >= 500 else ExitCode.REJECTED


def for_error(err: BaseException) -> ExitCode:
    """The exit code of an error a command raised: a server's refusal by its status, no answer as
    UNREACHABLE, anything else (bad local input) as USAGE."""
    if isinstance(err, ServerUnreachable):
        return ExitCode.UNREACHABLE
    if isinstance(err, SmartuneError) and err.status is not None:
        return for_status(err.status)
    return ExitCode.USAGE


def markdown_table() -> str:
    """The table as docs/cli.md holds it (a test compares the two)."""
    rows = [f"| {code.value} | `{code.name}` | {MEANING[code]} |" for code in ExitCode]
    return "\n".join(["| exit | name | meaning |", "| --- | --- | --- |", *rows]) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")

"""The deployment's secret checks: which of a configuration's secrets are empty, a well-known default or too
short to trust.

`Settings` runs `secret_problems` when it is built outside development and refuses to start on any, so a
team stack never runs with deploy/env.example's `changethis` passwords. Each problem names its variable,
never its value: the message is what the `smartune` commands print when they refuse to start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

DEFAULT_SECRETS = frozenset(
    {"", "changethis", "changeme", "secret", "password", "password1234", "minioadmin"}
)

# A bearer token of the deployment's own (the metrics token): long enough not to be guessed.
MIN_TOKEN_CHARS = 16
MIN_DASHBOARD_SECRET_CHARS = 32  # an HMAC-SHA256 key (the dashboard's, the MLflow logins'): 32 or more


class SecretSettings(Protocol):
    """What the checks read of `service.config.Settings` (which calls them while it is being built)."""

    database_url: str | None
    ray_address: str | None
    ray_auth_token: str | None
    mlflow_tracking_password: str | None
    aws_secret_access_key: str | None
    metrics_token: str | None
    dashboard_secret: str | None
    mlflow_team_secret: str | None


def _is_default(secret: str | None) -> bool:
    return secret is not None and secret.strip().lower() in DEFAULT_SECRETS


def secret_problems(settings: SecretSettings) -> list[str]:
    """One line per bad secret, naming its variable (never its value)."""
    problems: list[str] = []
    if settings.database_url:
        url = urlsplit(settings.database_url)
        if url.hostname and (url.password is None or _is_default(url.password)):
            problems.append("DATABASE_URL needs a password of its own")
    if settings.ray_address:
        token = settings.ray_auth_token or os.environ.get("RAY_AUTH_TOKEN")
        token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
        if (token is None and not token_file.is_file()) or _is_default(token):
            problems.append("RAY_AUTH_TOKEN is unset or a default (the Ray head runs with token auth)")
    if _is_default(settings.mlflow_tracking_password):
        problems.append("MLFLOW_TRACKING_PASSWORD is empty or a default")
    if _is_default(settings.aws_secret_access_key):
        problems.append("AWS_SECRET_ACCESS_KEY is empty or a default")
    if settings.metrics_token is not None and (
        _is_default(settings.metrics_token) or len(settings.metrics_token.strip()) < MIN_TOKEN_CHARS
    ):
        problems.append(
            f"SMARTUNE_METRICS_TOKEN is empty, a default or shorter than {MIN_TOKEN_CHARS} characters "
            "(unset it to let admin keys only read /metrics)"
        )
    if settings.dashboard_secret is not None and (
        _is_default(settings.dashboard_secret)
        or len(settings.dashboard_secret.strip()) < MIN_DASHBOARD_SECRET_CHARS
    ):
        problems.append(
            f"SMARTUNE_DASHBOARD_SECRET is empty, a default or shorter than {MIN_DASHBOARD_SECRET_CHARS} "
            "characters (unset, the dashboard is off in production)"
        )
    if settings.mlflow_team_secret is not None and (
        _is_default(settings.mlflow_team_secret)
        or len(settings.mlflow_team_secret.strip()) < MIN_DASHBOARD_SECRET_CHARS
    ):
        problems.append(
            f"SMARTUNE_MLFLOW_TEAM_SECRET is empty, a default or shorter than {MIN_DASHBOARD_SECRET_CHARS} "
            "characters (it derives every team's MLflow password)"
        )
    return problems

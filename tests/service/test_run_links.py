"""Where run and model links point (service.api.views.mlflow_ui_base): a link is handed out only where a
browser can open it, and only for a UI behind authentication."""

from __future__ import annotations

import pytest

from service.api.views import LOCAL_MLFLOW_UI, mlflow_ui_base
from service.config import Settings


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name in ("SMARTUNE_MLFLOW_UI_URL", "MLFLOW_TRACKING_URI", "SMARTUNE_MLFLOW_UI_PROTECTED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


@pytest.mark.parametrize(
    ("env", "base"),
    [
        ({"SMARTUNE_MLFLOW_UI_URL": "https://mlflow.example.org"}, "https://mlflow.example.org"),
        ({"MLFLOW_TRACKING_URI": "https://mlflow.corp"}, "https://mlflow.corp"),  # the tracking server
        ({}, LOCAL_MLFLOW_UI),  # a local store: where `mlflow ui` serves it
        # docker-compose.yml passes the variable through empty: its tracking URI is the compose network's
        ({"SMARTUNE_MLFLOW_UI_URL": "", "MLFLOW_TRACKING_URI": "http://mlflow:5000"}, None),
    ],
    ids=["configured", "tracking-server", "local-store", "set-empty"],
)
def test_a_link_points_where_a_browser_reaches_the_ui(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], base: str | None
) -> None:
    settings = _settings(monkeypatch, SMARTUNE_MLFLOW_UI_PROTECTED="true", **env)
    assert mlflow_ui_base(settings) == base


def test_no_link_while_the_ui_is_open_to_anyone(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, SMARTUNE_MLFLOW_UI_URL="https://mlflow.example.org")
    assert mlflow_ui_base(settings) is None

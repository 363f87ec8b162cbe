"""`SMARTUNE_ENV=production` refuses empty secrets and well-known defaults (deploy/env.example's
`changethis`), naming the variable and never printing the value; development accepts anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cli.main import main
from service.config import Settings

GOOD = {
    "env": "production",
    "database_url": "postgresql+psycopg2://smartune:s3cr3t-Value@postgres:5432/smartune",
    "ray_address": "http://ray-head:8265",
    "ray_auth_token": "a-real-token-0123456789",
}


@pytest.fixture(autouse=True)
def no_token_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "no-token-here"))


def test_production_with_real_secrets_starts() -> None:
    assert Settings(**GOOD).env == "production"


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"database_url": "postgresql://smartune:changethis@postgres/smartune"}, "DATABASE_URL"),
        ({"database_url": "postgresql://smartune@postgres/smartune"}, "DATABASE_URL"),
        ({"ray_auth_token": "changethis"}, "RAY_AUTH_TOKEN"),
        ({"ray_auth_token": None}, "RAY_AUTH_TOKEN"),  # and no token file either (the fixture)
        ({"mlflow_tracking_password": "password1234"}, "MLFLOW_TRACKING_PASSWORD"),
        ({"aws_secret_access_key": "minioadmin"}, "AWS_SECRET_ACCESS_KEY"),
    ],
)
def test_production_refuses_a_default_or_empty_secret(changed: dict[str, str | None], named: str) -> None:
    with pytest.raises(ValidationError, match=named) as caught:
        Settings(**(GOOD | changed))
    assert "changethis" not in str(caught.value).split("input_value")[0]  # the message names, never quotes


def test_development_accepts_the_example_values() -> None:
    assert Settings(**(GOOD | {"env": "development", "ray_auth_token": "changethis"})).ray_auth_token


def test_the_cli_says_which_variable_without_its_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SMARTUNE_ENV", "production")
    monkeypatch.setenv("SMARTUNE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("DATABASE_URL", "postgresql://smartune:changethis@127.0.0.1:1/smartune")
    assert main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert "DATABASE_URL needs a password of its own" in err and "changethis" not in err

"""`smartune serve` says where everything is: the API and its docs, the dashboard, the admin key."""

from __future__ import annotations

from pathlib import Path

from service.config import Settings
from service.server import banner


def test_the_banner_names_the_dashboard_and_the_admin_key(tmp_path: Path) -> None:
    lines = banner(Settings(data_dir=tmp_path, host="127.0.0.1", port=8123))
    text = "\n".join(lines)
    assert "API at http://127.0.0.1:8123/api/v1 (docs at http://127.0.0.1:8123/docs" in text
    assert "dashboard at http://127.0.0.1:8123/ui/jobs" in text
    assert f"admin key in {tmp_path / 'admin-key'}" in text and "create-team NAME` prints one" in text


def test_without_a_bootstrap_key_it_says_how_to_make_one(tmp_path: Path) -> None:
    text = "\n".join(banner(Settings(data_dir=tmp_path, bootstrap_admin=False)))
    assert "no admin key file" in text and "smartune admin create-key --admin" in text

"""The one rule for where data and models come from (worker.contract.sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.contract.sources import SourceError, classify, default_data_source, glue_dir


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("/abs/glue", "local"),
        ("~/glue", "local"),
        ("glue", "hub"),
        ("nyu-mll/glue", "hub"),
        ("bert-base-uncased", "hub"),
        ("EleutherAI/gpt-neo-1.3B", "hub"),
    ],
)
def test_absolute_paths_are_local_and_the_rest_hub_ids(value: str, kind: str) -> None:
    source = classify(value, "data")
    assert source.kind == kind
    if kind == "local":
        assert Path(source.value).is_absolute() and "~" not in source.value


@pytest.mark.parametrize(
    "value", ["train.csv", "./glue", "../shared/glue", "data/glue/RTE", "a\\b", "dev.jsonl"]
)
def test_relative_paths_are_refused_naming_the_field(value: str) -> None:
    with pytest.raises(SourceError, match=r"^data: .*relative path"):
        classify(value, "data")


def test_aliases_only_for_models_and_junk_is_refused() -> None:
    assert classify("minilm-l6", "model", aliases=True).kind == "alias"
    assert classify("minilm-l6", "data").kind == "hub"  # no alias for data: a hub id like any other
    for junk in ("", "  ", "not a hub id!", "org/name/extra/"):
        with pytest.raises(SourceError, match="^model: "):
            classify(junk, "model", aliases=True)
    with pytest.raises(ValueError, match="not a local path"):
        classify("glue", "data").path  # noqa: B018


def test_the_glue_folder_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SMARTUNE_GLUE_DIR", str(tmp_path))
    assert glue_dir() == tmp_path.resolve() and default_data_source() == str(tmp_path.resolve())
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("SMARTUNE_GLUE_DIR", "  ")  # unset: the checkout's sibling, from the working folder
    monkeypatch.chdir(empty)
    found = glue_dir()
    assert found is None or found.name == "glue"
    assert default_data_source({"SMARTUNE_GLUE_DIR": str(tmp_path)}) == str(tmp_path.resolve())

"""Shared test settings: offline Hugging Face, the GLUE folder from SMARTUNE_GLUE_DIR."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing in the tests may reach a hub: the packaged MiniLM and tiny random configs only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_SIBLING_GLUE = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"
if not os.environ.get("SMARTUNE_GLUE_DIR") and _SIBLING_GLUE.is_dir():
    os.environ["SMARTUNE_GLUE_DIR"] = str(_SIBLING_GLUE)  # the checkout's ../shared, as in CI


@pytest.fixture(scope="session")
def glue_dir() -> Path:
    """The real GLUE folder; tests that need it skip with the reason when it is absent."""
    value = os.environ.get("SMARTUNE_GLUE_DIR", "")
    if not value or not (Path(value) / "RTE" / "train.tsv").is_file():
        pytest.skip("real GLUE data absent: set SMARTUNE_GLUE_DIR to a folder with RTE/train.tsv")
    return Path(value)

"""The embedding-output split of a Hugging Face model that SMART perturbs (`EmbeddingAdapter`).

It lives in smart_core.integrations.embedding, beside the Trainer and accelerate integrations that split
models the same way; this module keeps the worker's (and research's) import path.
"""

from __future__ import annotations

from smart_core.integrations.embedding import EmbeddingAdapter

__all__ = ["EmbeddingAdapter"]

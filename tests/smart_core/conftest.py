"""smart_core tests run on tiny tensors: one intra-op thread is fastest, and it keeps the timing steady on a
busy 2-core machine (two threads contending with other processes make a 1 ms step take 100 ms)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

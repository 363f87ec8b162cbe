"""resources.gpu_memory_mb in the job spec: validated, absent from older specs' canonical JSON (their hash
holds), and the GPU fraction a trial packs to (Resources.packed_gpus)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from worker.contract.spec import JobSpec, Resources


def test_memory_needs_gpus_and_a_positive_figure() -> None:
    with pytest.raises(ValidationError, match="gpu_memory_mb needs gpus > 0"):
        Resources(gpu_memory_mb=1000)
    for bad in (0, -1, 17 * 2**20, "lots"):
        with pytest.raises(ValidationError, match="gpu_memory_mb"):
            Resources(gpus=1, gpu_memory_mb=bad)
    assert Resources(gpus=0.5, gpu_memory_mb=4096).gpu_memory_mb == 4096


def test_an_absent_figure_leaves_the_canonical_json_as_before() -> None:
    spec = JobSpec.model_validate({"task": "rte", "resources": {"gpus": 0.5}})
    assert "gpu_memory_mb" not in spec.canonical_json()
    given = JobSpec.model_validate({"task": "rte", "resources": {"gpus": 0.5, "gpu_memory_mb": 4096}})
    assert '"gpu_memory_mb":4096' in given.canonical_json() and given.spec_hash() != spec.spec_hash()
    assert JobSpec.model_validate_json(given.canonical_json()) == given


@pytest.mark.parametrize(
    ("gpus", "mb", "per_gpu", "packed"),
    [
        (0.25, 10_000, 80_000, 0.25),  # the user's fraction holds more than the memory needs
        (0.1, 10_000, 80_000, 0.125),  # the memory's share, rounded up to 1/16
        (0.25, 30_000, 80_000, 0.375),
        (0.25, 40_000, 80_000, 0.5),  # exactly half: no rounding past it
        (0.5, 90_000, 80_000, 1.0),  # more than a GPU: a whole one (and no more)
        (1.0, 90_000, 80_000, 1.0),  # whole GPUs stay whole
        (2.0, 10_000, 80_000, 2.0),
        (0.25, None, 80_000, 0.25),  # no figure: the fraction as given
        (0.25, 30_000, None, 0.25),  # the GPU's memory unknown: likewise
    ],
)
def test_packed_fractions(gpus: float, mb: float | None, per_gpu: float | None, packed: float) -> None:
    assert Resources(gpus=gpus, gpu_memory_mb=mb).packed_gpus(per_gpu) == packed


def test_packing_never_overcommits_a_gpu() -> None:
    """Trials that Ray's fraction accounting fits on one GPU (fractions summing to at most 1) never reserve
    more memory than the GPU has, whatever their figures."""
    per_gpu = 81_559.0
    for mb in range(500, 81_559, 997):
        fraction = Resources(gpus=0.01, gpu_memory_mb=mb).packed_gpus(per_gpu)
        fits = int(1 // fraction)
        assert fits * mb <= per_gpu and fraction * 16 == int(fraction * 16)

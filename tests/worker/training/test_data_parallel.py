"""Data-parallel trials on CPU with 2 gloo ranks (`workers: 2`): the same run as one worker with the whole
batch, ranks that stay in step (weights and SMART's teacher), exact resume at an epoch boundary, and a
follower's failure reported by rank 0. Each run starts a real second process (spawn), as a trial does."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch

from worker.contract.trial import TrainConfig
from worker.training.finetune import RunCallbacks, run_training
from worker.training.parallel import RankFailed, data_parallel
from worker.training.ranks import Ranks, shard
from worker.training.session import TrainingSession

pytestmark = [pytest.mark.glue, pytest.mark.usefixtures("starts_processes")]  # rank 1 is a spawned process


def _config(glue_dir: Path, **kw: Any) -> TrainConfig:
    base = {"task": "rte", "data": str(glue_dir), "model": "tiny-random", "epochs": 2, "batch_size": 8,
            "max_train_samples": 40, "max_eval_samples": 16, "max_seq_length": 64, "learning_rate": 1e-3,
            "num_threads": 2}  # fmt: skip
    return TrainConfig(**{**base, **kw})


def _losses(config: TrainConfig) -> tuple[list[float], dict[str, Any]]:
    """Per-step training losses (rank 0 reports the whole batch's) and the run's metrics document."""
    steps: list[float] = []
    result = run_training(
        config, None, RunCallbacks(on_step=lambda _s, _t, parts: steps.append(parts["loss"]))
    )
    return steps, result


def test_a_rank_without_examples_runs_one_with_weight_zero() -> None:
    chunks = [[4, 5], [6]]
    assert shard(chunks, Ranks(0, 2)) == ([4, 5], 1.0)
    assert shard(chunks, Ranks(1, 2)) == ([6], 1.0)
    assert shard([[7]], Ranks(1, 2)) == ([7], 0.0)


@pytest.mark.parametrize("method", ["vanilla", "smart-breg-only"])
def test_two_ranks_with_half_batches_match_one_rank_with_the_whole(glue_dir: Path, method: str) -> None:
    """Without dropout or random perturbation the loss curve of 2 ranks × b/2 is 1 rank × b's, step by step
    (the teacher's EMA included: `smart-breg-only` has no noise), and so are the dev metrics."""
    one, one_result = _losses(_config(glue_dir, method=method, dropout=0.0))
    two, two_result = _losses(_config(glue_dir, method=method, dropout=0.0, workers=2))
    assert len(one) == len(two) == 10  # 40 examples / 8 per batch × 2 epochs
    torch.testing.assert_close(torch.tensor(two), torch.tensor(one), rtol=1e-4, atol=1e-5)
    for a, b in zip(one_result["epochs"], two_result["epochs"], strict=True):
        assert a["metrics"] == pytest.approx(b["metrics"], abs=1e-6)
    assert two_result["provenance"]["workers"] == 2


def test_smart_trains_on_two_ranks_that_stay_in_step(glue_dir: Path) -> None:
    """SMART with dropout and random perturbations: each rank draws its own noise, the weights and the
    momentum teacher stay identical across ranks (checked by the ranks every epoch, else RanksDiverged),
    and the losses stay within the noise of the single-rank run."""
    one, _ = _losses(_config(glue_dir, method="smart"))
    two, result = _losses(_config(glue_dir, method="smart", workers=2))
    assert all(torch.isfinite(torch.tensor(two)))
    assert result["epochs"][-1]["components"]["r_s"] > 0
    torch.testing.assert_close(torch.tensor(two), torch.tensor(one), rtol=0.05, atol=0.05)


def test_two_ranks_resume_exactly_at_an_epoch_boundary(glue_dir: Path) -> None:
    """Killed after epoch 1 and restarted from its state, a 2-rank SMART run with dropout ends exactly where
    the uninterrupted one ends: the state is rank 0's, the other ranks' RNG is derived per epoch."""
    config = _config(glue_dir, method="smart", workers=2)
    straight = run_training(config, None)
    saved: dict[str, Any] = {}

    class Interrupted(Exception):
        pass

    def stop_after_first(session: TrainingSession, record: dict[str, Any], _best: bool) -> None:
        buffer = io.BytesIO()
        torch.save(session.state_dict(), buffer)  # what a trial checkpoint holds
        saved.update(state=buffer.getvalue(), record=record)
        raise Interrupted

    with pytest.raises(Interrupted):
        run_training(config, None, RunCallbacks(on_epoch_end=stop_after_first))
    state = torch.load(io.BytesIO(saved["state"]), weights_only=True)
    with data_parallel(config, state) as ranks:
        session = TrainingSession.build(config, ranks)
        session.load_state_dict(state)
        resumed = run_training(config, None, session=session, history=[saved["record"]])
    for key in ("train_loss", "metrics", "components"):
        assert resumed["epochs"][1][key] == straight["epochs"][1][key], key


def test_a_failing_rank_is_reported_by_rank_zero(glue_dir: Path) -> None:
    """A follower that cannot restore the state it was given fails; rank 0, waiting for it in the first
    collective, fails the run with the follower's traceback instead of hanging."""
    config = _config(glue_dir, workers=2, epochs=1)
    with pytest.raises(RankFailed, match=r"rank 1:(.|\n)*KeyError"):
        with data_parallel(config, {"not": "a session state"}) as ranks:
            run_training(config, None, session=TrainingSession.build(config, ranks))

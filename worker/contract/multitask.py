"""Multi-task SMART (MT-DNN-SMART, paper §5.3): the spec's `multitask` block and the plan a trial carries.

With the block, the spec's tasks are trained jointly (a shared encoder, one head per task, each batch from
one task) for `training.epochs` epochs, then each task is fine-tuned alone from the shared weights for
`finetune_epochs` epochs. Without it, a list of tasks means one separate trial per task, as before.
Pydantic and the standard library only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from pydantic import Field

from worker.contract.search import StrictModel

Sampling = Literal["round-robin", "proportional"]
SAMPLINGS: tuple[str, ...] = get_args(Sampling)
PLAN_KEY = "multitask"  # the key of a Tune trial config that holds the MultitaskPlan (absent: single task)


class Multitask(StrictModel):
    """The spec's `multitask` block."""

    sampling: Sampling = Field(
        "round-robin",
        description="order of the task batches in a joint epoch: round-robin (interleaved until every "
        "task's batches are used) or proportional (a seeded shuffle of all task batches: each task's share "
        "is its share of the batches)",
    )
    finetune_epochs: int = Field(
        0, ge=0, le=100, description="epochs of per-task fine-tuning from the shared weights; 0: none"
    )


@dataclass(frozen=True)
class MultitaskPlan:
    """What a multitask trial trains: its tasks (in the spec's order), the batch order and the fine-tuning
    epochs. Plain data: it travels in the Tune trial config as `to_dict()`."""

    tasks: tuple[str, ...]
    sampling: str = "round-robin"
    finetune_epochs: int = 0

    def __post_init__(self) -> None:
        if len(self.tasks) < 2 or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"multitask: needs at least 2 distinct tasks, got {list(self.tasks)}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"multitask.sampling: {self.sampling!r} is not one of {', '.join(SAMPLINGS)}")
        if self.finetune_epochs < 0:
            raise ValueError(f"multitask.finetune_epochs: {self.finetune_epochs} must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tasks"] = list(self.tasks)
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> MultitaskPlan:
        return cls(
            tasks=tuple(values["tasks"]),
            sampling=str(values.get("sampling", "round-robin")),
            finetune_epochs=int(values.get("finetune_epochs", 0)),
        )

    def units(self, joint_epochs: int) -> int:
        """Epoch units a trial reports to Tune: the joint epochs, then one per task per fine-tuning epoch."""
        return joint_epochs + len(self.tasks) * self.finetune_epochs

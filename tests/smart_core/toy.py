"""A tiny embedding model and a separable toy task for smart_core tests (no transformers)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from smart_core import ModelFns


class ToyEncoder(nn.Module):
    """Embedding + LayerNorm (the perturbed output), a per-token layer, masked mean pool, linear head."""

    def __init__(self, vocab: int = 50, hidden: int = 16, outputs: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.layer = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, outputs)
        self.outputs = outputs

    def embed(self, ids: Tensor) -> Tensor:
        return self.dropout(self.norm(self.embedding(ids)))  # (B, T, H)

    def from_embeddings(self, emb: Tensor, mask: Tensor) -> Tensor:
        h = torch.tanh(self.layer(emb))  # (B, T, H)
        m = mask.to(h.dtype).unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0)  # (B, H)
        out = self.head(self.dropout(pooled))
        return out.squeeze(-1) if self.outputs == 1 else out  # (B, C) or (B,)

    def fns(self, ids: Tensor, mask: Tensor) -> ModelFns:
        return ModelFns(
            embed=lambda: self.embed(ids), forward=lambda e: self.from_embeddings(e, mask), mask=mask
        )


def toy_batch(
    batch: int = 8, length: int = 6, vocab: int = 50, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    """Token ids (B, T), a mask with some padding (B, T), and labels: 1 if token 1 occurs, else 0."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (batch, length), generator=g)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=g)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()
    labels = torch.arange(batch) % 2
    ids[labels == 1, 0] = 1  # the separable signal
    ids = ids * mask  # padding id 0
    return ids, mask, labels

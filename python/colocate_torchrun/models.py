"""The experiment's two model families and the synthetic data they learn.

The data come from a fixed random *teacher* (seeded), not from a download: the tests and CI run
without network access to a dataset host, every worker of every generation builds the very same
samples, and the best reachable loss is known to exist (the teacher's). A CTR-like task for the
Wide & Deep model (categorical fields with pairwise crosses, a few dense features, a click drawn
from the teacher's probability) and a 10-class task for the MLP (a random two-layer teacher).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

DATA_SEED = 7
FIELDS = 8
IDS_PER_FIELD = 100
DENSE = 4
CROSSES = ((0, 1), (2, 3), (4, 5))
MLP_FEATURES = 32
MLP_CLASSES = 10


@dataclass(frozen=True)
class Dataset:
    """Samples as tensors; ``cat`` is empty for the MLP task."""

    cat: torch.Tensor  # (n, FIELDS) int64
    dense: torch.Tensor  # (n, DENSE or MLP_FEATURES) float32
    label: torch.Tensor  # (n,) float32 clicks or int64 classes

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def rows(self, index: torch.Tensor) -> "Dataset":
        cat = self.cat[index] if self.cat.numel() else self.cat
        return Dataset(cat, self.dense[index], self.label[index])


def ctr_data(train: int, test: int) -> tuple[Dataset, Dataset]:
    """Clicks from a teacher with per-id weights, pairwise field crosses and a dense part."""
    g = torch.Generator().manual_seed(DATA_SEED)
    n = train + test
    cat = torch.randint(0, IDS_PER_FIELD, (n, FIELDS), generator=g)
    dense = torch.randn(n, DENSE, generator=g)
    id_weight = torch.randn(FIELDS, IDS_PER_FIELD, generator=g) * 0.6
    logit = id_weight[torch.arange(FIELDS), cat].sum(dim=1)
    for a, b in CROSSES:
        cross_weight = torch.randn(IDS_PER_FIELD, IDS_PER_FIELD, generator=g) * 0.8
        logit = logit + cross_weight[cat[:, a], cat[:, b]]
    logit = logit + dense @ (torch.randn(DENSE, generator=g) * 0.5) - 1.0
    label = torch.bernoulli(torch.sigmoid(logit), generator=g)
    data = Dataset(cat, dense, label)
    return data.rows(torch.arange(train)), data.rows(torch.arange(train, n))


def mlp_data(train: int, test: int) -> tuple[Dataset, Dataset]:
    """Classes from a random two-layer teacher with a little label noise."""
    g = torch.Generator().manual_seed(DATA_SEED)
    n = train + test
    x = torch.randn(n, MLP_FEATURES, generator=g)
    w1 = torch.randn(MLP_FEATURES, 64, generator=g) / MLP_FEATURES**0.5
    w2 = torch.randn(64, MLP_CLASSES, generator=g) / 8.0
    logits = torch.tanh(x @ w1) @ w2 * 6.0
    label = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=g).squeeze(1)
    data = Dataset(torch.empty(0, dtype=torch.int64), x, label)
    return data.rows(torch.arange(train)), data.rows(torch.arange(train, n))


class WideDeep(nn.Module):
    """Wide part: one weight per id and per crossed id pair; deep part: embeddings and dense
    features through an MLP. Outputs a click logit."""

    def __init__(self, emb_dim: int = 8) -> None:
        super().__init__()
        self.wide = nn.Embedding(FIELDS * IDS_PER_FIELD, 1)
        self.wide_cross = nn.Embedding(len(CROSSES) * IDS_PER_FIELD * IDS_PER_FIELD, 1)
        self.emb = nn.Embedding(FIELDS * IDS_PER_FIELD, emb_dim)
        self.deep = nn.Sequential(
            nn.Linear(FIELDS * emb_dim + DENSE, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1)
        )
        self.register_buffer("offsets", torch.arange(FIELDS) * IDS_PER_FIELD, persistent=False)

    def forward(self, cat: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        ids = cat + self.offsets
        crosses = torch.stack(
            [k * IDS_PER_FIELD * IDS_PER_FIELD + cat[:, a] * IDS_PER_FIELD + cat[:, b] for k, (a, b) in enumerate(CROSSES)],
            dim=1,
        )
        wide = self.wide(ids).sum(dim=(1, 2)) + self.wide_cross(crosses).sum(dim=(1, 2))
        deep = self.deep(torch.cat([self.emb(ids).flatten(1), dense], dim=1)).squeeze(1)
        return wide + deep


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(MLP_FEATURES, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, MLP_CLASSES))

    def forward(self, cat: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        del cat
        return self.net(dense)


@dataclass(frozen=True)
class Task:
    """A model family with its data, loss and quality metric."""

    name: str
    metric: str  # "auc" or "accuracy"

    def data(self, train: int, test: int) -> tuple[Dataset, Dataset]:
        return ctr_data(train, test) if self.name == "wide-deep" else mlp_data(train, test)

    def model(self) -> nn.Module:
        return WideDeep() if self.name == "wide-deep" else Mlp()

    def loss(self, output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        if self.name == "wide-deep":
            return nn.functional.binary_cross_entropy_with_logits(output, label)
        return nn.functional.cross_entropy(output, label)

    def quality(self, output: torch.Tensor, label: torch.Tensor) -> float:
        if self.name == "wide-deep":
            return auc(output, label)
        return float((output.argmax(dim=1) == label).float().mean())


TASKS = {"wide-deep": Task("wide-deep", "auc"), "mlp": Task("mlp", "accuracy")}


def auc(score: torch.Tensor, label: torch.Tensor) -> float:
    """Area under the ROC curve by the rank-sum (Mann-Whitney) formula; ties are rare with
    continuous scores and not averaged."""
    order = torch.argsort(score)
    ranks = torch.empty_like(order, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(score) + 1, dtype=torch.float64)
    positives = label > 0.5
    n_pos = int(positives.sum())
    n_neg = len(label) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))

"""What a rank's probe records about each DataLoader, as the data checks read it.

The probe fills these records and stores them with `dataclasses.asdict` (plain dicts, lists and
numpy arrays: the only things a multi-node audit lets through its record exchange);
`RankRecord.from_plain` rebuilds them.

Samples are identified by their *root*: the dataset at the bottom of the chain the loader reads
through (Subset, nested Subsets as random_split makes them, ConcatDataset). A root key is the
root's offset among the loader's roots plus the index inside that root, so two ranks' keys name
the same sample exactly when their roots are the same data (`RootData.same_as`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RootData:
    """One dataset at the bottom of a loader's chain, as one rank holds it."""

    kind: str  # module.qualname of its class
    length: int | None
    anchors: list[str] | None = None  # fingerprints of a few samples at fixed positions; None: not read
    index_stable: bool | None = None  # one index read twice gave the same content; None: not read

    def same_as(self, other: RootData) -> bool:
        """The same data: the same class and length and identical anchor samples."""
        return (
            self.kind == other.kind and self.length == other.length and self.anchors is not None and self.anchors == other.anchors
        )

    def describe(self) -> str:
        return f"{self.kind.rsplit('.', 1)[-1]} of {self.length}" if self.length is not None else self.kind


@dataclass
class EpochRecord:
    sampler_epoch: Any = None
    full: np.ndarray | None = None  # the rank's whole-epoch indices into the loader's dataset
    keys: np.ndarray | None = None  # the same samples as root keys
    drawn: list[list] = field(default_factory=list)  # indices actually fetched, per fetch
    fingerprints: list[list[str]] = field(default_factory=list)  # per yielded batch, per sample
    yielded: int = 0  # batches yielded
    exhausted: bool = False  # the loader ended the epoch by itself (not cut at --steps)


@dataclass
class SetEpochCall:
    value: Any
    owner: str  # sampler, batch_sampler, dataset, ...


@dataclass
class LoaderRecord:
    site: str  # file:line of the DataLoader(...) call in the script
    dataset: str  # class name of the loader's dataset
    dataset_len: int | None
    iterable: bool
    chain: str  # how the loader reaches its roots: "Subset(Subset(TensorDataset))"
    roots: list[RootData]
    sampler: str | None  # the sampler that decides the indices (the distributed one when any)
    batch_sampler: str | None  # a batch sampler the script passed (batch_sampler= or sampler=)
    shuffle: bool | None
    replacement: bool
    num_replicas: int | None
    sampler_rank: int | None  # the rank the distributed sampler was built for
    sampler_drop_last: bool | None
    padding: int | None  # repeats the distributed sampler adds to even out ranks; None: all it yields beyond
    #                      the dataset (a shard of batches that evens out the ranks)
    sampler_len: int | None  # length of the per-sample sampler (inside any batch sampler)
    batch_size: int | None
    batch_drop_last: bool  # a batch sampler (or the loader) drops the last partial batch
    batched: bool  # a fetch returns several samples
    num_workers: int
    image_digest: str | None = None  # digest of the root keys of every index: equal => same indexing
    reachable: np.ndarray | None = None  # sorted distinct root keys the chain can reach
    epochs: list[EpochRecord] = field(default_factory=list)
    set_epoch: list[SetEpochCall] = field(default_factory=list)
    training: bool = False


def distinct_keys(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of non-negative keys, through a presence array: linear, where
    np.unique takes seconds on a million keys."""
    if not a.size:
        return a.astype(np.int64)
    present = np.zeros(int(a.max()) + 1, dtype=bool)
    present[a] = True
    return np.flatnonzero(present)

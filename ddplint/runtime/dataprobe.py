"""DataLoader instrumentation inside a rank: what each loader drew, and when to stop.

Patched at class level, so loaders created anywhere in the script (or its helpers) are seen:
- `DataLoader.__init__` tags the loader with its creation site (file:line in the user's code);
  loaders created at one site are one loader across epochs, even when re-created each epoch.
- `DataLoader.__iter__` starts an epoch of that loader: it snapshots the sampler's full-epoch
  index list (by iterating the index sampler with every RNG state saved and restored, so the
  script's randomness is untouched and no sample is loaded) and, for the training loader, ends
  the audit at the start of epoch `epochs` by raising AuditStop: a batch boundary that every
  rank reaches at the same point of the script, before its next collective.
- the base iterator's `_next_index` records the sampler indices actually drawn, and its
  `__next__` fingerprints each yielded batch and stops the epoch after `steps` batches, so the
  script's own epoch-end code (set_epoch, evaluation, checkpoint) really runs.
- `set_epoch` calls are recorded on DistributedSampler (class level) and on any other sampler,
  batch sampler or dataset that has one (instance level, at loader creation).

The training loader is the first loader iterated among those that shuffle, or, when none
shuffles, the first iterated with autograd enabled.
"""

from __future__ import annotations

import random
import sys
from typing import Callable

from ddplint.runtime.fingerprint import batch_fingerprints


class AuditStop(BaseException):
    """Unwinds the user's script once the audit has seen --epochs epochs (not an Exception,
    so the script's own `except Exception` handlers do not swallow it)."""


_RANDOM_SAMPLERS = ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler")


def _shuffles(obj) -> bool | None:
    if obj is None:
        return None
    if type(obj).__name__ in _RANDOM_SAMPLERS:
        return True
    value = getattr(obj, "shuffle", None)
    return value if isinstance(value, bool) else None


class LoaderTracker:
    def __init__(self, steps: int, epochs: int, skip_dirs: tuple[str, ...],
                 on_phase: Callable[..., None], on_first_batch: Callable[[], None]):
        self.steps = steps
        self.epochs = epochs
        self.skip_dirs = skip_dirs
        self.on_phase = on_phase
        self.on_first_batch = on_first_batch
        self.loaders: dict[str, dict] = {}
        self.training_site: str | None = None
        self._last_loader: dict[str, object] = {}  # per site, to drain its last set_epoch calls
        self._orig: dict[str, object] = {}

    # -- creation --

    def _site(self) -> str:
        f = sys._getframe(2)
        while f is not None:
            fn = f.f_code.co_filename
            if not fn.startswith(self.skip_dirs) and not fn.startswith("<frozen"):
                return f"{fn}:{f.f_lineno}"
            f = f.f_back
        return "<unknown>"

    def _owners(self, loader) -> list[tuple[str, object]]:
        from torch.utils.data import BatchSampler

        owners = [("sampler", loader.sampler), ("dataset", loader.dataset)]
        bs = loader.batch_sampler
        if bs is not None and type(bs) is not BatchSampler:
            owners.append(("batch_sampler", bs))
            inner = getattr(bs, "sampler", None)
            if inner is not None and inner is not loader.sampler:
                owners.append(("batch_sampler.sampler", inner))
        return owners

    def _index_owner(self, loader):
        """The object whose order decides the data: a custom batch sampler, else the sampler."""
        from torch.utils.data import BatchSampler

        bs = loader.batch_sampler
        if bs is not None and type(bs) is not BatchSampler:
            inner = getattr(bs, "sampler", None)
            return inner if inner is not None and _shuffles(inner) is not None else bs
        return loader.sampler

    def _created(self, loader) -> None:
        from torch.utils.data import IterableDataset

        site = self._site()
        loader._ddplint_site = site
        owner = self._index_owner(loader)
        iterable = isinstance(loader.dataset, IterableDataset)
        try:
            dataset_len = len(loader.dataset)
        except Exception:
            dataset_len = None
        try:
            sampler_len = None if iterable else len(owner)
        except Exception:
            sampler_len = None
        rec = self.loaders.get(site)
        if rec is None:
            rec = self.loaders[site] = {"site": site, "epochs": [], "set_epoch": [], "training": False}
        rec.update({
            "dataset": type(loader.dataset).__name__,
            "dataset_len": dataset_len,
            "iterable": iterable,
            "sampler": None if iterable else type(owner).__name__,
            "shuffle": None if iterable else _shuffles(owner),
            "num_replicas": getattr(owner, "num_replicas", None),
            "sampler_rank": getattr(owner, "rank", None),
            "sampler_drop_last": getattr(owner, "drop_last", None),
            "sampler_len": sampler_len,
            "replacement": getattr(owner, "replacement", None),
            "batch_size": loader.batch_size,
            "drop_last": loader.drop_last,
            "batched": loader.batch_sampler is not None,
        })
        self._last_loader[site] = loader
        for label, obj in self._owners(loader):
            self._watch_set_epoch(obj, label)

    def _watch_set_epoch(self, obj, label: str) -> None:
        method = getattr(obj, "set_epoch", None)
        if not callable(method) or getattr(method, "_ddplint_wrapped", False):
            return
        from torch.utils.data.distributed import DistributedSampler

        if isinstance(obj, DistributedSampler) and type(obj).set_epoch is DistributedSampler.set_epoch:
            return  # recorded by the class-level wrapper

        def set_epoch(epoch, *args, **kwargs):
            _note_set_epoch(obj, epoch, label)
            return method(epoch, *args, **kwargs)

        set_epoch._ddplint_wrapped = True
        try:
            obj.set_epoch = set_epoch
        except (AttributeError, TypeError):
            pass  # a slotted or frozen object: its calls cannot be seen

    # -- epochs --

    def _drain_set_epoch(self, loader, rec: dict) -> None:
        for _, obj in self._owners(loader):
            calls = getattr(obj, "_ddplint_set_epoch", None)
            if calls:
                rec["set_epoch"].extend(calls)
                calls.clear()

    def _full_epoch(self, loader, rec: dict):
        """The whole epoch's indices for this rank, from the index sampler alone."""
        if rec["iterable"]:
            return None
        sampler = loader._index_sampler
        try:
            len(sampler)
        except TypeError:
            return None
        import numpy as np

        saved = _save_rng(sampler, loader)
        try:
            items = list(sampler)
        except Exception:
            return None
        finally:
            _restore_rng(saved)
        if rec["batched"]:
            items = [i for batch in items for i in batch]
        try:
            return np.asarray(items, dtype=np.int64)
        except (TypeError, ValueError):
            return None

    def _iter(self, loader):
        site = getattr(loader, "_ddplint_site", None)
        rec = self.loaders.get(site)
        if rec is None:
            return self._orig["iter"](loader)
        self._drain_set_epoch(loader, rec)
        if self.training_site is None and self._is_training(rec):
            self.training_site = site
            rec["training"] = True
        if site == self.training_site and len(rec["epochs"]) >= self.epochs:
            raise AuditStop
        owner = self._index_owner(loader)
        epoch = {
            "sampler_epoch": getattr(owner, "epoch", None),
            "full": self._full_epoch(loader, rec),
            "drawn": [],
            "fingerprints": [],
            "yielded": 0,
            "exhausted": False,
        }
        rec["epochs"].append(epoch)
        it = self._orig["iter"](loader)
        it._ddplint_epoch = epoch
        it._ddplint_rec = rec
        return it

    def _is_training(self, rec: dict) -> bool:
        import torch

        if any(r["shuffle"] for r in self.loaders.values()):
            return bool(rec["shuffle"])
        return torch.is_grad_enabled()

    def _next_index(self, it):
        index = self._orig["next_index"](it)
        epoch = getattr(it, "_ddplint_epoch", None)
        if epoch is not None and index is not None:
            epoch["drawn"].append(list(index) if isinstance(index, (list, tuple)) else [index])
        return index

    def _next(self, it):
        epoch = getattr(it, "_ddplint_epoch", None)
        if epoch is None:
            return self._orig["next"](it)
        rec = it._ddplint_rec
        training = rec["training"]
        if epoch["yielded"] >= self.steps:
            if training:
                self.on_phase("epoch end", epoch=len(rec["epochs"]) - 1)
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None and not getattr(it, "_persistent_workers", False):
                shutdown()
            raise StopIteration
        try:
            batch = self._orig["next"](it)
        except StopIteration:
            epoch["exhausted"] = True
            if training:
                self.on_phase("epoch end", epoch=len(rec["epochs"]) - 1)
            raise
        epoch["fingerprints"].append(batch_fingerprints(batch, rec["batched"]))
        epoch["yielded"] += 1
        if training:
            if epoch["yielded"] == 1 and len(rec["epochs"]) == 1:
                self.on_first_batch()
            self.on_phase("step", step=epoch["yielded"], epoch=len(rec["epochs"]) - 1)
        return batch

    # -- installation --

    def install(self) -> None:
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter
        from torch.utils.data.distributed import DistributedSampler

        orig_init = DataLoader.__init__
        orig_set_epoch = DistributedSampler.set_epoch
        self._orig = {"init": orig_init, "iter": DataLoader.__iter__, "set_epoch": orig_set_epoch,
                      "next": _BaseDataLoaderIter.__next__, "next_index": _BaseDataLoaderIter._next_index}
        tracker = self

        def __init__(loader, *args, **kwargs):
            orig_init(loader, *args, **kwargs)
            tracker._created(loader)

        def set_epoch(sampler, epoch):
            _note_set_epoch(sampler, epoch, "sampler")
            return orig_set_epoch(sampler, epoch)

        DataLoader.__init__ = __init__
        DataLoader.__iter__ = lambda loader: tracker._iter(loader)
        DistributedSampler.set_epoch = set_epoch
        _BaseDataLoaderIter.__next__ = lambda it: tracker._next(it)
        _BaseDataLoaderIter._next_index = lambda it: tracker._next_index(it)

    def records(self) -> dict[str, dict]:
        """Per-site loader records, with the set_epoch calls made after their last epoch."""
        for site, loader in self._last_loader.items():
            self._drain_set_epoch(loader, self.loaders[site])
        return self.loaders


def _note_set_epoch(obj, epoch, label: str) -> None:
    calls = obj.__dict__.setdefault("_ddplint_set_epoch", [])
    calls.append({"value": epoch if isinstance(epoch, (int, float, str)) else repr(epoch), "owner": label})


def _save_rng(sampler, loader) -> list:
    import torch

    saved = [("torch", torch.get_rng_state()), ("random", random.getstate())]
    np = sys.modules.get("numpy")
    if np is not None:
        saved.append(("numpy", np.random.get_state()))
    seen = set()
    for obj in (sampler, getattr(sampler, "sampler", None), loader):
        gen = getattr(obj, "generator", None)
        if isinstance(gen, torch.Generator) and id(gen) not in seen:
            seen.add(id(gen))
            saved.append((gen, gen.get_state()))
    return saved


def _restore_rng(saved: list) -> None:
    import torch

    for key, state in saved:
        if key == "torch":
            torch.set_rng_state(state)
        elif key == "random":
            random.setstate(state)
        elif key == "numpy":
            sys.modules["numpy"].random.set_state(state)
        else:
            key.set_state(state)

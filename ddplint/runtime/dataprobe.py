"""DataLoader instrumentation inside a rank: what each loader drew, and when to stop.

Patched at class level, so loaders created anywhere in the script (or its helpers) are seen:
- `DataLoader.__init__` tags the loader with its creation site (file:line in the user's code);
  loaders created at one site are one loader across epochs, even when re-created each epoch.
  It also reads the sampler chain (a batch sampler the script passed, of any class, and the
  samplers inside it) and the dataset chain (Subset, ConcatDataset, ChainDataset) down to its
  root datasets.
- `DataLoader.__iter__` starts an epoch of that loader: it snapshots the sampler's full-epoch
  index list (by iterating the index sampler with every RNG state saved and restored, so the
  script's randomness is untouched and no sample is loaded), maps every index to its root key
  and, for the training loader, ends the audit at the start of epoch `epochs` by raising
  AuditStop: a batch boundary that every rank reaches at the same point of the script, before
  its next collective.
- the base iterator's `_next_index` records the sampler indices actually drawn, and its
  `__next__` fingerprints each yielded batch and stops the epoch after `steps` batches, so the
  script's own epoch-end code (set_epoch, evaluation, checkpoint) really runs.
- `set_epoch` calls are recorded on DistributedSampler (class level) and on any other sampler,
  batch sampler or dataset that has one (instance level, at loader creation).
- when the script has ended, a few anchor samples of every root dataset are read (RNG seeded
  alike on every rank) so the checks can tell whether the ranks hold the same data.

The training loader is the first loader iterated among those that shuffle, or, when none
shuffles, the first iterated with autograd enabled.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import operator
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from types import FrameType

from ddplint.runtime.datarecords import (
    EpochRecord,
    LoaderRecord,
    RootData,
    SetEpochCall,
    distinct_keys,
)
from ddplint.runtime.fingerprint import batch_fingerprints, whole_digest


class AuditStop(BaseException):
    """Unwinds the user's script once the audit has seen --epochs epochs (not an Exception,
    so the script's own `except Exception` handlers do not swallow it)."""


_ANCHORS = 5  # samples read per root dataset to compare the ranks' data
_MAX_DEPTH = 16  # wrapper levels followed, in the sampler and the dataset chain


def _shuffles(obj) -> bool | None:
    from torch.utils.data import (
        RandomSampler,
        SubsetRandomSampler,
        WeightedRandomSampler,
    )

    if obj is None:
        return None
    if isinstance(obj, (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)):
        return True
    value = getattr(obj, "shuffle", None)
    return value if isinstance(value, bool) else None


def _length(obj) -> int | None:
    try:
        return len(obj)
    except Exception:  # noqa: BLE001 - a user's __len__ may raise anything
        return None


def _qualname(obj) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


# -- the sampler chain ---------------------------------------------------------------------


class SamplerChain:
    """The samplers that decide a loader's indices, outermost first: a batch sampler the script
    (or a framework) passed (`batch_sampler=`, or a sampler that yields lists), then each
    `.sampler` or `.batch_sampler` inside. The distributed one is a DistributedSampler (or any
    sampler with `num_replicas` and `rank`) or a shard of batches per process (accelerate's
    BatchSamplerShard: `num_processes` and `process_index`)."""

    def __init__(self, loader):
        bs = loader.batch_sampler
        given = bs is not None and getattr(bs, "sampler", None) is not loader.sampler
        top = bs if given else loader.sampler
        self.objects = [top]
        while len(self.objects) < _MAX_DEPTH:
            obj = self.objects[-1]
            inner = getattr(obj, "sampler", None)
            if inner is None:
                inner = getattr(obj, "batch_sampler", None)
            if inner is None or any(inner is o for o in self.objects):
                break
            self.objects.append(inner)
        self.batching = _is_batch_sampler(top)
        self.batch_sampler = top if self.batching else None
        # the per-sample sampler: the first one inside every batch sampler
        self.element = next((o for o in self.objects if not _is_batch_sampler(o)), self.objects[-1])
        self.distributed = next((o for o in self.objects if _replicas(o) is not None), None)
        loader_batches = bs is not None and not given
        self.drop_last = bool(loader.drop_last) if loader_batches else bool(getattr(top, "drop_last", False) and self.batching)

    @property
    def decider(self):
        """The sampler whose order decides the data: the distributed one, else the innermost."""
        return self.distributed if self.distributed is not None else self.objects[-1]

    @property
    def num_replicas(self) -> int | None:
        return _replicas(self.distributed)

    @property
    def rank(self) -> int | None:
        d = self.distributed
        rank = getattr(d, "rank", getattr(d, "process_index", None))
        return rank if isinstance(rank, int) else None

    def shuffle(self) -> bool | None:
        return next((s for s in map(_shuffles, self.objects) if s is not None), None)

    def padding(self, dataset_len: int | None) -> int | None:
        """Samples the distributed sampler repeats to give every rank the same count; None when
        it evens the ranks out by an amount known only from what it yields (a batch shard)."""
        d = self.distributed
        if d is None or getattr(d, "drop_last", False):
            return 0
        if getattr(d, "num_replicas", None) is None:
            return None if getattr(d, "even_batches", False) else 0
        total = getattr(d, "total_size", None)
        n = _length(getattr(d, "dataset", None))
        n = dataset_len if n is None else n
        if n is None:
            return 0
        if not isinstance(total, int):
            replicas = d.num_replicas
            total = -(-n // replicas) * replicas
        return max(0, total - n)


def _replicas(obj) -> int | None:
    value = getattr(obj, "num_replicas", getattr(obj, "num_processes", None))
    return value if isinstance(value, int) else None


def _is_batch_sampler(obj) -> bool:
    from torch.utils.data import BatchSampler

    return isinstance(obj, BatchSampler) or (
        hasattr(obj, "batch_size") and (hasattr(obj, "sampler") or hasattr(obj, "batch_sampler"))
    )


# -- the dataset chain ---------------------------------------------------------------------


class DatasetChain:
    """The datasets under a loader's dataset: Subset and ConcatDataset are followed to the
    map-style roots they index, ChainDataset to the iterable datasets it chains. Every index of
    the loader's dataset maps to a root key (the root's offset + the index inside it)."""

    def __init__(self, dataset) -> None:
        self.roots: list = []
        self._offsets: dict[int, int | None] = {}
        self.text = self._walk(dataset, 0)

    def _walk(self, ds, depth: int) -> str:
        from torch.utils.data import ChainDataset, ConcatDataset, Subset

        name = type(ds).__name__
        if depth < _MAX_DEPTH and isinstance(ds, Subset):
            return f"{name}({self._walk(ds.dataset, depth + 1)})"
        if (
            depth < _MAX_DEPTH and isinstance(ds, (ConcatDataset, ChainDataset)) and isinstance(ds.datasets, (list, tuple))
        ):  # a generator would be consumed
            return f"{name}[{', '.join(self._walk(d, depth + 1) for d in ds.datasets)}]"
        if id(ds) not in self._offsets:
            offset: int | None = 0
            for r in self.roots:
                n = _length(r)
                offset = None if offset is None or n is None else offset + n
            self._offsets[id(ds)] = offset
            self.roots.append(ds)
        return name

    def keys(self, dataset, idx):
        """Root keys of the indices `idx` (int64 array) of `dataset`; None when not traceable."""
        try:
            return self._keys(dataset, idx, 0)
        except (IndexError, TypeError, ValueError, KeyError):
            return None

    def _keys(self, ds, idx, depth: int):
        import numpy as np
        from torch.utils.data import ConcatDataset, Subset

        if depth < _MAX_DEPTH and isinstance(ds, Subset):
            inner = np.asarray(ds.indices, dtype=np.int64)
            return self._keys(ds.dataset, inner[idx], depth + 1)
        if depth < _MAX_DEPTH and isinstance(ds, ConcatDataset) and isinstance(ds.datasets, (list, tuple)):
            ends = np.asarray(ds.cumulative_sizes, dtype=np.int64)
            starts = np.concatenate([[0], ends[:-1]])
            which = np.searchsorted(ends, idx, side="right")
            out = np.empty(len(idx), dtype=np.int64)
            for k in np.unique(which):
                sel = which == k
                sub = self._keys(ds.datasets[int(k)], idx[sel] - starts[k], depth + 1)
                if sub is None:
                    return None
                out[sel] = sub
            return out
        offset = self._offsets.get(id(ds))
        if offset is None or (idx.size and (idx.min() < 0 or (_length(ds) or 0) <= idx.max())):
            return None
        return idx + offset

    def describe(self) -> list[RootData]:
        return [RootData(_qualname(r), _length(r)) for r in self.roots]


def read_anchors(root, length: int | None) -> tuple[list[str] | None, bool | None]:
    """Fingerprints of the samples at a few fixed positions, every RNG seeded alike (random
    augmentations then agree across ranks) and restored afterwards; and whether the first
    position, read again once the RNG has moved on, gives the same content: a dataset whose
    `__getitem__` ignores the index (random windows) does not. (None, None) when unreadable."""
    from torch.utils.data import IterableDataset

    if isinstance(root, IterableDataset) or not length:
        return None, None
    positions = sorted({round(i * (length - 1) / (_ANCHORS - 1)) for i in range(_ANCHORS)})
    saved = _save_rng(())
    try:
        _seed_all(0)
        anchors = [whole_digest(root[i]).hex() for i in positions]
        return anchors, whole_digest(root[positions[0]]).hex() == anchors[0]
    except Exception:  # noqa: BLE001 - the user's dataset: unreadable is an answer
        return None, None
    finally:
        _restore_rng(saved)


# -- the tracker ---------------------------------------------------------------------------


def _peek(epoch: EpochRecord) -> bool:
    """An iterator the script dropped after its first batch, before the loader ran out."""
    return epoch.yielded <= 1 and not epoch.exhausted


class LoaderTracker:
    def __init__(
        self,
        steps: int,
        epochs: int,
        skip_dirs: tuple[str, ...],
        on_phase: Callable[..., None],
        on_first_batch: Callable[[], None],
        clock=None,
    ):
        self.steps = steps
        self.clock = clock  # a perfprobe.StepClock: told when the training loader's batches come
        self.epochs = epochs
        self.skip_dirs = skip_dirs
        self.on_phase = on_phase
        self.on_first_batch = on_first_batch
        self.loaders: dict[str, LoaderRecord] = {}
        self.training_site: str | None = None
        self._last_loader: dict[str, object] = {}  # per site, to drain its last set_epoch calls
        self._chains: dict[str, DatasetChain] = {}  # per site, of its last loader
        self._site_of_dataset: dict[int, tuple[object, str]] = {}  # loaders the script made itself
        self._orig: dict[str, object] = {}

    # -- creation --

    def _site(self, dataset) -> str:
        """The script's line that made this loader: its innermost frame outside every library.
        A loader a framework builds from one of the script's (Lightning adding a
        DistributedSampler, accelerate's prepare) is the same loader: same dataset, same site."""
        from ddplint.runtime.sites import library_dirs

        libraries = library_dirs()
        caller = site = None
        f: FrameType | None = sys._getframe(2)
        while f is not None and site is None:
            fn = f.f_code.co_filename
            if not fn.startswith(("<frozen", "<string>")):
                if caller is None and not fn.startswith(self.skip_dirs):
                    caller = fn  # the code that called DataLoader(...)
                if not fn.startswith(libraries):
                    site = f"{fn}:{f.f_lineno}"
            f = f.f_back
        earlier = self._site_of_dataset.get(id(dataset))
        if caller is not None and caller.startswith(libraries) and earlier is not None and earlier[0] is dataset:
            return earlier[1]
        site = site or "<unknown>"
        if caller is not None and not caller.startswith(libraries):
            self._site_of_dataset[id(dataset)] = (dataset, site)
        return site

    @staticmethod
    def _owners(loader) -> list[tuple[str, object]]:
        """Every object whose set_epoch may reorder the data."""
        owners: list[tuple[str, object]] = [("sampler", loader.sampler)]
        for obj in SamplerChain(loader).objects:
            if all(obj is not o for _, o in owners):
                owners.append(("batch_sampler" if _is_batch_sampler(obj) else "sampler", obj))
        owners.append(("dataset", loader.dataset))
        return owners

    def _created(self, loader) -> None:
        from torch.utils.data import IterableDataset

        site = self._site(loader.dataset)
        loader._ddplint_site = site
        chain = SamplerChain(loader)
        datasets = DatasetChain(loader.dataset)
        iterable = isinstance(loader.dataset, IterableDataset)
        dataset_len = _length(loader.dataset)
        decider = chain.decider
        rec = LoaderRecord(
            site=site,
            dataset=type(loader.dataset).__name__,
            dataset_len=dataset_len,
            iterable=iterable,
            chain=datasets.text,
            roots=datasets.describe(),
            sampler=None if iterable else type(decider).__name__,
            batch_sampler=type(chain.batch_sampler).__name__ if chain.batch_sampler is not None else None,
            shuffle=None if iterable else chain.shuffle(),
            replacement=any(getattr(o, "replacement", False) is True for o in chain.objects),
            num_replicas=chain.num_replicas,
            sampler_rank=chain.rank,
            sampler_drop_last=getattr(chain.distributed, "drop_last", None),
            padding=0 if iterable else chain.padding(dataset_len),
            sampler_len=None if iterable else _length(chain.element),
            batch_size=loader.batch_size if loader.batch_size is not None else getattr(chain.batch_sampler, "batch_size", None),
            batch_drop_last=chain.drop_last,
            batched=loader.batch_sampler is not None or chain.batching,
            num_workers=int(loader.num_workers or 0),
        )
        old = self.loaders.get(site)
        if old is not None:
            rec = replace(
                rec,
                epochs=old.epochs,
                set_epoch=old.set_epoch,
                training=old.training,
                image_digest=old.image_digest,
                reachable=old.reachable,
            )
        self.loaders[site] = rec
        self._last_loader[site] = loader
        self._chains[site] = datasets
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
            _inside_set_epoch.add(id(obj))  # its super().set_epoch is the same call
            try:
                return method(epoch, *args, **kwargs)
            finally:
                _inside_set_epoch.discard(id(obj))

        set_epoch._ddplint_wrapped = True  # type: ignore[attr-defined]
        try:
            obj.set_epoch = set_epoch
        except (AttributeError, TypeError):
            pass  # a slotted or frozen object: its calls cannot be seen

    # -- epochs --

    def _drain_set_epoch(self, loader, rec: LoaderRecord) -> None:
        for _, obj in self._owners(loader):
            calls = getattr(obj, "__dict__", {}).get("_ddplint_set_epoch")
            if calls:
                rec.set_epoch.extend(calls)
                calls.clear()

    def _full_epoch(self, loader, rec: LoaderRecord):
        """The whole epoch's indices for this rank, from the index sampler alone."""
        if rec.iterable:
            return None
        sampler = loader._index_sampler
        if _length(sampler) is None:
            return None
        import numpy as np

        saved = _save_rng(SamplerChain(loader).objects + [loader])
        try:
            items = list(sampler)
        except Exception:  # noqa: BLE001 - the user's sampler: no full epoch then
            return None
        finally:
            _restore_rng(saved)
        if items and (isinstance(items[0], (list, tuple)) or getattr(items[0], "ndim", False)):
            items = list(itertools.chain.from_iterable(items))  # batches, or a sampler that yields lists
        try:
            arr = np.asarray(items)
            if arr.ndim == 1 and arr.dtype.kind in "iu":
                return arr.astype(np.int64, copy=False)
            return np.fromiter((operator.index(i) for i in items), dtype=np.int64, count=len(items))
        except (TypeError, ValueError):
            return None  # indices that are not integers (keys of a dict-like dataset)

    def _map_epoch(self, loader, rec: LoaderRecord, epoch: EpochRecord) -> None:
        """Root keys of the epoch's indices, and, once per site, of every index of the dataset."""
        import numpy as np

        chain = self._chains[rec.site]
        if epoch.full is None:
            return
        epoch.keys = chain.keys(loader.dataset, epoch.full)
        if epoch.keys is not None and rec.reachable is None and rec.dataset_len is not None:
            image = chain.keys(loader.dataset, np.arange(rec.dataset_len, dtype=np.int64))
            if image is not None:
                rec.image_digest = hashlib.blake2b(image.tobytes(), digest_size=8).hexdigest()
                rec.reachable = distinct_keys(image)

    def _iter(self, loader):
        site = getattr(loader, "_ddplint_site", None)
        rec = self.loaders.get(site) if site is not None else None
        if rec is None:
            return self._orig["iter"](loader)
        self._drain_set_epoch(loader, rec)
        if rec.epochs and _peek(rec.epochs[-1]):
            rec.epochs.pop()  # `next(iter(loader))` to look at a batch (its size, say): not an epoch
        if self.training_site is None and self._is_training(rec):
            self.training_site = site
            rec.training = True
        if site == self.training_site and len(rec.epochs) >= self.epochs:
            raise AuditStop
        epoch = EpochRecord(
            sampler_epoch=getattr(SamplerChain(loader).decider, "epoch", None), full=self._full_epoch(loader, rec)
        )
        self._map_epoch(loader, rec, epoch)
        rec.epochs.append(epoch)
        it = self._orig["iter"](loader)
        it._ddplint_epoch = epoch
        it._ddplint_rec = rec
        return it

    def _is_training(self, rec: LoaderRecord) -> bool:
        import torch

        if any(r.shuffle for r in self.loaders.values()):
            return bool(rec.shuffle)
        return torch.is_grad_enabled()

    def _next_index(self, it):
        index = self._orig["next_index"](it)
        epoch = getattr(it, "_ddplint_epoch", None)
        if epoch is not None and index is not None:
            if isinstance(index, (list, tuple)):
                epoch.drawn.append(list(index))
                it._ddplint_rec.batched = True  # a sampler that yields lists: one fetch, many samples
            else:
                epoch.drawn.append([index])
        return index

    def _next(self, it):
        epoch = getattr(it, "_ddplint_epoch", None)
        if epoch is None:
            return self._orig["next"](it)
        rec = it._ddplint_rec
        training = rec.training
        clock = self.clock if training else None
        called = time.perf_counter()
        if epoch.yielded >= self.steps:
            if clock is not None:
                clock.epoch_end(len(rec.epochs) - 1, called)
            if training:
                self.on_phase("epoch end", epoch=len(rec.epochs) - 1)
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None and not getattr(it, "_persistent_workers", False):
                shutdown()
            raise StopIteration
        try:
            batch = self._orig["next"](it)
        except StopIteration:
            epoch.exhausted = True
            if clock is not None:
                clock.epoch_end(len(rec.epochs) - 1, called)
            if training:
                self.on_phase("epoch end", epoch=len(rec.epochs) - 1)
            raise
        got = time.perf_counter()
        epoch.fingerprints.append(batch_fingerprints(batch, rec.batched))
        epoch.yielded += 1
        if training:
            if epoch.yielded == 1 and len(rec.epochs) == 1:
                self.on_first_batch()
            self.on_phase("step", step=epoch.yielded, epoch=len(rec.epochs) - 1)
        if clock is not None:
            clock.batch(len(rec.epochs) - 1, epoch.yielded, called, got, time.perf_counter())
        return batch

    # -- installation --

    def install(self) -> None:
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter
        from torch.utils.data.distributed import DistributedSampler

        orig_init = DataLoader.__init__
        orig_set_epoch = DistributedSampler.set_epoch
        self._orig = {
            "init": orig_init,
            "iter": DataLoader.__iter__,
            "set_epoch": orig_set_epoch,
            "next": _BaseDataLoaderIter.__next__,
            "next_index": _BaseDataLoaderIter._next_index,
        }
        tracker = self

        @functools.wraps(orig_init)  # the signature stays DataLoader's: frameworks read it to re-create loaders
        def __init__(loader, *args, **kwargs):
            orig_init(loader, *args, **kwargs)
            try:
                tracker._created(loader)
            except Exception:  # noqa: BLE001 - a loader the probe cannot read is left unaudited, never broken
                loader.__dict__.pop("_ddplint_site", None)

        def set_epoch(sampler, epoch):
            if id(sampler) not in _inside_set_epoch:
                _note_set_epoch(sampler, epoch, "sampler")
            return orig_set_epoch(sampler, epoch)

        DataLoader.__init__ = __init__  # type: ignore[method-assign,assignment]
        DataLoader.__iter__ = lambda loader: tracker._iter(loader)  # type: ignore[method-assign]
        DistributedSampler.set_epoch = set_epoch  # type: ignore[method-assign]
        _BaseDataLoaderIter.__next__ = lambda it: tracker._next(it)  # type: ignore[method-assign,assignment]
        _BaseDataLoaderIter._next_index = lambda it: tracker._next_index(it)  # type: ignore[method-assign]

    def position(self) -> tuple[int, int] | None:
        """Where the training loader is: (its epoch, the batches it yielded in that epoch)."""
        rec = self.loaders.get(self.training_site) if self.training_site is not None else None
        if rec is None or not rec.epochs:
            return None
        return len(rec.epochs) - 1, rec.epochs[-1].yielded

    def records(self) -> dict[str, dict]:
        """Per-site loader records as plain data: the set_epoch calls made after their last
        epoch drained, and the anchor samples of every root read (once the script is done)."""
        out = {}
        for site, rec in self.loaders.items():
            loader = self._last_loader[site]
            self._drain_set_epoch(loader, rec)
            roots = self._chains[site].roots
            read = [read_anchors(obj, r.length) for r, obj in zip(rec.roots, roots, strict=False)]
            rec.roots = [
                replace(r, anchors=anchors, index_stable=stable) for r, (anchors, stable) in zip(rec.roots, read, strict=False)
            ]
            out[site] = asdict(rec)
        return out


_inside_set_epoch: set[int] = set()  # objects whose own set_epoch wrapper is running


def _note_set_epoch(obj, epoch, label: str) -> None:
    calls = obj.__dict__.setdefault("_ddplint_set_epoch", [])
    calls.append(SetEpochCall(epoch if isinstance(epoch, (int, float, str)) else repr(epoch), label))


def _save_rng(objects) -> list[tuple]:
    import torch

    saved: list[tuple] = [("torch", torch.get_rng_state()), ("random", random.getstate())]
    np = sys.modules.get("numpy")
    if np is not None:
        saved.append(("numpy", np.random.get_state()))
    seen = set()
    for obj in objects:
        gen = getattr(obj, "generator", None)
        if isinstance(gen, torch.Generator) and id(gen) not in seen:
            seen.add(id(gen))
            saved.append((gen, gen.get_state()))
    return saved


def _seed_all(seed: int) -> None:
    import torch

    torch.default_generator.manual_seed(seed)  # the CPU generator only, as _save_rng saves
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed)


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

"""Data checks over the ranks' loader records: disjoint shards, coverage, content, set_epoch.

Every DataLoader is identified by its creation site (file:line) and judged on its own; a check's
status is the worst over loaders. Only the training loader can FAIL data.disjoint and
data.content: an evaluation loader read whole by every rank is duplicated work, a WARN.

The index audit works on whole-epoch index lists (a rank of an ImageNet job holds ~160k
indices); it counts with numpy in time linear in the dataset size (bench/runtime_overhead.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ddplint.runtime.sites import short
from ddplint.runtime.verdict import CheckResult, Status

_ORDER = [Status.SKIP, Status.PASS, Status.INFO, Status.WARN, Status.FAIL]
_CONTENT_FAIL_RATIO = 0.5  # below that, shared samples are more likely duplicates in the data


def worst(statuses) -> Status:
    return max(statuses, key=_ORDER.index, default=Status.SKIP)


@dataclass
class IndexAudit:
    """What the ranks' full-epoch index lists say about one epoch."""

    n: int  # dataset length
    drawn: int  # indices drawn by all ranks together
    covered: int  # distinct indices drawn by some rank
    duplicates: int  # drawn - covered: reads of an index beyond its first
    pairs: list[tuple[int, int, int, float]] = field(default_factory=list)  # (a, b, shared, ratio)

    @property
    def missing(self) -> int:
        return self.n - self.covered


def audit_indices(per_rank: dict[int, np.ndarray], n: int, pairs: bool = True) -> IndexAudit:
    """Count duplicates and coverage; with `pairs`, the overlap of the most-overlapping rank
    with every other rank (linear: one presence array, one pass per rank)."""
    ranks = sorted(per_rank)
    arrays = [np.asarray(per_rank[r], dtype=np.int64) for r in ranks]
    size = max([n] + [int(a.max()) + 1 for a in arrays if a.size])
    # Ranks per index, from one boolean scatter per rank: a bool array stays in cache far
    # longer than bincount's int64 counters, which is what keeps this near linear.
    counts = np.zeros(size, dtype=np.uint8 if len(arrays) < 255 else np.uint32)
    seen = np.zeros(size, dtype=bool)
    for a in arrays:
        seen[:] = False
        seen[a] = True
        np.add(counts, seen, out=counts, casting="unsafe")
    drawn = int(sum(a.size for a in arrays))
    covered = int(np.count_nonzero(counts[:n]))
    audit = IndexAudit(n=n, drawn=drawn, covered=covered, duplicates=drawn - int(np.count_nonzero(counts)))
    if pairs and audit.duplicates and len(ranks) > 1:
        multi = counts > 1
        shared = [float(np.mean(multi[a])) if a.size else 0.0 for a in arrays]
        top = int(np.argmax(shared))
        present = np.zeros(size, dtype=bool)
        present[arrays[top]] = True
        top_unique = int(np.count_nonzero(present))
        for i, a in enumerate(arrays):
            if i == top or not a.size:
                continue
            seen[:] = False
            seen[a] = True
            both = int(np.count_nonzero(seen & present))
            if both:
                ratio = both / max(1, min(top_unique, int(np.count_nonzero(seen))))
                audit.pairs.append((ranks[top], ranks[i], both, ratio))
        audit.pairs.sort(key=lambda p: -p[3])
    return audit


@dataclass
class Loader:
    site: str
    per_rank: dict[int, dict]  # rank -> that rank's record of this loader
    training: bool

    @property
    def meta(self) -> dict:
        return self.per_rank[min(self.per_rank)]

    def name(self, base: str) -> str:
        m = self.meta
        what = f"{m['dataset']}" + (f", {m['sampler']}" if m.get("sampler") else "")
        role = "training " if self.training else ""
        return f"{role}DataLoader at {short(self.site, base)} ({what})"


def loaders_of(records: dict[int, dict]) -> list[Loader]:
    sites: dict[str, Loader] = {}
    for rank, rec in sorted(records.items()):
        for site, lrec in (rec.get("loaders") or {}).items():
            if not lrec.get("epochs"):
                continue
            loader = sites.setdefault(site, Loader(site, {}, False))
            loader.per_rank[rank] = lrec
            loader.training = loader.training or bool(lrec.get("training"))
    return sorted(sites.values(), key=lambda l: (not l.training, l.site))


def _padding(meta: dict, world: int) -> int:
    """Duplicates a DistributedSampler adds to even out ranks (drop_last=False)."""
    n, replicas = meta.get("dataset_len"), meta.get("num_replicas")
    if n is None or replicas != world or meta.get("sampler_drop_last"):
        return 0
    return -(-n // world) * world - n


def _documented_drops(loader: Loader, world: int) -> tuple[int, list[str]]:
    meta = loader.meta
    n, drops, why = meta.get("dataset_len") or 0, 0, []
    if meta.get("num_replicas") == world and meta.get("sampler_drop_last") and n % world:
        drops += n % world
        why.append(f"DistributedSampler(drop_last=True) drops {n % world} (len {n} % {world} ranks)")
    bs = meta.get("batch_size")
    if meta.get("drop_last") and bs:
        loader_drops = sum((r.get("sampler_len") or 0) % bs for r in loader.per_rank.values())
        if loader_drops:
            drops += loader_drops
            why.append(f"DataLoader(drop_last=True) drops {loader_drops} (last partial batch per rank)")
    return drops, why


def _full_lists(loader: Loader, epoch: int = 0) -> dict[int, np.ndarray] | None:
    lists = {}
    lens = set()
    for rank, lrec in loader.per_rank.items():
        eps = lrec["epochs"]
        if len(eps) <= epoch or eps[epoch].get("full") is None:
            return None
        lists[rank] = eps[epoch]["full"]
        lens.add(lrec.get("dataset_len"))
    if len(lens) != 1 or None in lens:
        return None  # ranks hold datasets of different lengths: indices name different samples
    return lists


def _fingerprints(loader: Loader, batches: int | None = None) -> dict[int, set[str]]:
    out = {}
    for rank, lrec in loader.per_rank.items():
        fps = lrec["epochs"][0]["fingerprints"]
        out[rank] = {fp for batch in fps[:batches] for fp in batch}
    return out


def _fingerprint_pairs(fps: dict[int, set[str]]) -> list[tuple[int, int, int, float]]:
    ranks = sorted(fps)
    pairs = []
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            both = len(fps[a] & fps[b])
            if both:
                pairs.append((a, b, both, both / max(1, min(len(fps[a]), len(fps[b])))))
    return sorted(pairs, key=lambda p: -p[3])


def _pair_line(pair: tuple[int, int, int, float], unit: str, verb: str = "read the same") -> str:
    a, b, both, ratio = pair
    return f"ranks {a} and {b} {verb} {ratio:.0%} of {unit} ({both} shared)"


def _distributed(meta: dict) -> bool:
    return meta.get("num_replicas") is not None


def _result(check: str, per_loader: list[tuple[Status, str, list[str], str | None, str | None]],
            empty: str, data: list[dict]) -> CheckResult:
    if not per_loader:
        return CheckResult(check, Status.SKIP, empty)
    status = worst(s for s, *_ in per_loader)
    lead = next(p for p in per_loader if p[0] == status)
    evidence = []
    for s, summary, lines, _, _ in per_loader:
        if len(per_loader) > 1:
            evidence.append(f"{s.value}: {summary}")
        evidence.extend(lines)
    return CheckResult(check, status, lead[1], evidence, fix=lead[4], rule=lead[3], data={"loaders": data})


def check_disjoint(loaders: list[Loader], world: int, base: str) -> CheckResult:
    out, data = [], []
    for loader in loaders:
        if len(loader.per_rank) < 2:
            continue
        meta, name = loader.meta, loader.name(base)
        full = _full_lists(loader)
        if full is not None:
            audit = audit_indices(full, meta["dataset_len"])
            pad = _padding(meta, world)
            unit = "sample indices"
            item = {"site": loader.site, "level": "indices", "duplicates": audit.duplicates,
                    "padding": pad, "pairs": [list(p) for p in audit.pairs]}
            if audit.duplicates == 0:
                out.append((Status.PASS, f"{name}: ranks read disjoint samples", [], None, None))
            elif audit.duplicates <= pad:
                out.append((Status.WARN,
                             f"{name}: {audit.duplicates} padding duplicate(s) per epoch "
                             f"(len {meta['dataset_len']} % {world} ranks; DistributedSampler repeats "
                             f"samples to even out ranks)", [], None,
                             "use drop_last=True in the DistributedSampler, or a dataset length "
                             "divisible by the world size, if the repeats matter"))
            else:
                out.append(_overlap(loader, name, [_pair_line(p, unit) for p in audit.pairs[:3]],
                                    audit.pairs[0][3] if audit.pairs else 1.0))
        else:
            fps = _fingerprints(loader)
            pairs = _fingerprint_pairs(fps)
            item = {"site": loader.site, "level": "fingerprints", "pairs": [list(p) for p in pairs]}
            if not pairs:
                out.append((Status.PASS, f"{name}: no sample read by two ranks (by content)", [], None, None))
            else:
                out.append(_overlap(loader, name, [_pair_line(p, "samples") for p in pairs[:3]], pairs[0][3]))
        data.append(item)
    return _result("data.disjoint", out, "fewer than two ranks iterated any DataLoader", data)


def _overlap(loader: Loader, name: str, lines: list[str], ratio: float):
    meta = loader.meta
    if not loader.training:
        return (Status.WARN, f"{name}: every rank reads the same samples ({ratio:.0%} overlap); "
                f"work repeated on every rank", lines, None,
                "give this loader a DistributedSampler(shuffle=False) and reduce the metric")
    if meta.get("iterable"):
        fix = "shard the IterableDataset by rank (torch.distributed.get_rank()/get_world_size()) in __iter__"
    elif _distributed(meta):
        fix = "build the DistributedSampler with the real num_replicas and rank (or let it read them)"
    else:
        fix = "pass sampler=DistributedSampler(dataset) to the DataLoader"
    return (Status.FAIL, f"{name}: {lines[0] if lines else 'ranks read the same samples'}",
            lines[1:], "DDP201", fix)


def check_coverage(loaders: list[Loader], world: int, base: str) -> CheckResult:
    out, data = [], []
    for loader in loaders:
        meta, name = loader.meta, loader.name(base)
        full = _full_lists(loader)
        if full is None or len(loader.per_rank) < world:
            continue
        if meta.get("replacement"):
            out.append((Status.SKIP, f"{name}: samples with replacement, coverage is not defined", [], None, None))
            continue
        audit = audit_indices(full, meta["dataset_len"], pairs=False)
        drops, why = _documented_drops(loader, world)
        data.append({"site": loader.site, "dataset_len": audit.n, "covered": audit.covered,
                     "missing": audit.missing, "documented_drops": drops})
        if audit.missing == 0:
            out.append((Status.PASS, f"{name}: the ranks together read all {audit.n} samples per epoch",
                        [], None, None))
        elif audit.missing <= drops:
            out.append((Status.INFO, f"{name}: {audit.missing} of {audit.n} samples dropped per epoch "
                        f"(drop_last=True)", why, None, None))
        else:
            out.append((Status.FAIL, f"{name}: {audit.missing - drops} of {audit.n} samples are read by no "
                        f"rank in an epoch", why, None,
                        "shard with DistributedSampler (it covers every sample), or fix the custom split"))
    return _result("data.coverage", out, "no map-style DataLoader with a sized sampler on every rank", data)


def check_content(loaders: list[Loader], world: int, base: str, batches: int) -> CheckResult:
    out, data = [], []
    for loader in loaders:
        if len(loader.per_rank) < 2:
            continue
        name = loader.name(base)
        fps = _fingerprints(loader, batches)
        pairs = _fingerprint_pairs(fps)
        allowed = _padding(loader.meta, world)
        shared = sum(p[2] for p in pairs)
        data.append({"site": loader.site, "batches": batches, "pairs": [list(p) for p in pairs]})
        lines = [_pair_line(p, f"samples in the first {batches} batches", "received identical content for")
                 for p in pairs[:3]]
        if pairs and pairs[0][3] >= _CONTENT_FAIL_RATIO:
            out.append(_overlap(loader, name, lines, pairs[0][3]))
        elif shared > allowed:
            out.append((Status.WARN, f"{name}: {shared} identical sample(s) across ranks in the first "
                        f"{batches} batches (duplicates in the data, or a partial overlap)", lines, None, None))
        else:
            out.append((Status.PASS, f"{name}: no identical samples across ranks in the first {batches} "
                        f"batches", [], None, None))
    return _result("data.content", out, "fewer than two ranks iterated any DataLoader", data)


def _order(epoch: dict) -> np.ndarray | None:
    if epoch.get("full") is not None:
        return np.asarray(epoch["full"])
    if epoch.get("drawn"):
        return np.asarray([i for batch in epoch["drawn"] for i in batch], dtype=object)
    return None


def check_set_epoch(loaders: list[Loader], base: str) -> CheckResult:
    out, data = [], []
    for loader in loaders:
        meta, name = loader.meta, loader.name(base)
        if meta.get("iterable"):
            continue
        same_on, compared = [], 0
        for rank, lrec in sorted(loader.per_rank.items()):
            eps = lrec["epochs"]
            if len(eps) < 2:
                continue
            a, b = _order(eps[0]), _order(eps[1])
            if a is None or b is None:
                continue
            compared += 1
            if len(a) == len(b) and bool(np.all(a == b)):
                same_on.append(rank)
        if not compared:
            continue
        calls = [c["value"] for c in meta.get("set_epoch", [])]
        shown = ", ".join(f"set_epoch({v})" for v in calls[:4]) + (" ..." if len(calls) > 4 else "")
        data.append({"site": loader.site, "same_order_ranks": same_on, "set_epoch_calls": calls,
                     "shuffle": meta.get("shuffle")})
        sampler = meta.get("sampler")
        if not same_on:
            why = f" ({shown})" if calls else ""
            out.append((Status.PASS, f"{name}: the order changes between epochs{why}", [], None, None))
        elif not meta.get("shuffle"):
            out.append((Status.PASS, f"{name}: same order every epoch; the sampler does not shuffle",
                        [], None, None))
        elif not calls:
            out.append((Status.FAIL, f"{name}: same order in epoch 0 and epoch 1 on rank(s) "
                        f"{_ranks(same_on)}: {sampler}.set_epoch() is never called", [], "DDP202",
                        "call sampler.set_epoch(epoch) at the start of every epoch"))
        elif len(set(map(str, calls))) == 1:
            out.append((Status.FAIL, f"{name}: same order in epoch 0 and epoch 1 on rank(s) "
                        f"{_ranks(same_on)}: {sampler}.set_epoch() is always called with {calls[0]!r}",
                        [f"calls seen: {shown}"], "DDP204", "pass the epoch number: sampler.set_epoch(epoch)"))
        else:
            out.append((Status.FAIL, f"{name}: same order in epoch 0 and epoch 1 on rank(s) "
                        f"{_ranks(same_on)} although set_epoch was called ({shown})", [], None, None))
    return _result("data.set_epoch", out, "no map-style DataLoader ran two epochs on a rank", data)


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def data_checks(records: dict[int, dict], world: int, base: str, steps: int) -> list[CheckResult]:
    loaders = loaders_of(records)
    return [
        check_disjoint(loaders, world, base),
        check_coverage(loaders, world, base),
        check_content(loaders, world, base, steps),
        check_set_epoch(loaders, base),
    ]

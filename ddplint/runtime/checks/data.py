"""Data checks over the ranks' loader records: disjoint shards, duplicates, coverage, content,
set_epoch.

Every DataLoader is identified by its creation site (file:line) and judged on its own; a check's
status is the worst over loaders. Only the training loader can FAIL data.disjoint and
data.content: an evaluation loader read whole by every rank is duplicated work, a WARN.

Samples are compared by index only when the ranks are shown to hold the same data (`identify`):
- `indices`: every rank reaches the same root datasets (same class, length and anchor samples)
  through the same indexing, so the sampler's indices name the same samples on every rank;
- `roots`: the same root datasets, reached through different Subsets (a per-rank split): the
  indices are mapped to root indices first;
- `fingerprints`: otherwise (an IterableDataset, ranks holding different data, a dataset that
  indexes others in its own way): only the samples' content can be compared, and a high share
  of identical samples is the verdict.

The index audit works on whole-epoch index lists (a rank of an ImageNet job holds ~160k
indices); it counts with numpy in time linear in the dataset size (bench/runtime_overhead.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ddplint.runtime.datarecords import LoaderRecord, distinct_keys
from ddplint.runtime.registry import DATA_CONTENT, DATA_COVERAGE, DATA_DISJOINT, DATA_DUPLICATES, DATA_SET_EPOCH, ids
from ddplint.runtime.sites import short
from ddplint.runtime.verdict import CheckResult, Status, worst

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

# Share of a rank's samples that, identical on another rank (or repeated within one rank), is
# not explained by duplicates in the data.
_CONTENT_FAIL_RATIO = 0.3


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


def repeats(a: np.ndarray) -> int:
    """Reads of an index beyond its first within one list."""
    return int(a.size - distinct_keys(a).size)


@dataclass
class Loader:
    site: str
    per_rank: dict[int, LoaderRecord]  # rank -> that rank's record of this loader
    training: bool

    @property
    def meta(self) -> LoaderRecord:
        return self.per_rank[min(self.per_rank)]

    @cached_property
    def basis(self) -> Basis:
        return identify(self)

    @cached_property
    def audit(self) -> IndexAudit:
        """The index audit of epoch 0 (only where the basis compares indices), shared by the checks."""
        return audit_indices(self.basis.lists, self.basis.n)

    @cached_property
    def shared_draws(self) -> SharedDraws:
        """For a sampler with replacement (indices compared): the draws ranks share, against chance."""
        return _shared_draws(self)

    def name(self, base: str) -> str:
        m = self.meta
        what = m.chain if len(m.chain) <= 60 else m.chain[:57] + "..."
        sampler = m.sampler
        if m.batch_sampler and m.batch_sampler != sampler:
            sampler = f"{m.batch_sampler}({sampler})" if sampler else m.batch_sampler
        what += f", {sampler}" if sampler else ""
        role = "training " if self.training else ""
        return f"{role}DataLoader at {short(self.site, base)} ({what})"

    def summary(self) -> dict:
        """This loader's entry in the report's `loaders[]`."""
        m = self.meta
        return {
            "site": self.site,
            "training": self.training,
            "dataset": m.dataset,
            "dataset_len": m.dataset_len,
            "sampler": m.sampler,
            "shuffle": m.shuffle,
            "batch_size": m.batch_size,
            "ranks": sorted(self.per_rank),
            "epochs_seen": max(len(r.epochs) for r in self.per_rank.values()),
            "set_epoch_calls": [c.value for c in m.set_epoch],
            "chain": m.chain,
            "batch_sampler": m.batch_sampler,
            "num_workers": m.num_workers,
        }


def loaders_of(records: dict[int, RankRecord]) -> list[Loader]:
    sites: dict[str, Loader] = {}
    for rank, rec in sorted(records.items()):
        for site, lrec in rec.loaders.items():
            if not lrec.epochs:
                continue
            loader = sites.setdefault(site, Loader(site, {}, False))
            loader.per_rank[rank] = lrec
            loader.training = loader.training or lrec.training
    return sorted(sites.values(), key=lambda loader: (not loader.training, loader.site))


# -- how samples are identified across ranks -------------------------------------------------


class Level(str, Enum):
    INDICES = "indices"
    ROOTS = "roots"
    FINGERPRINTS = "fingerprints"


@dataclass
class Basis:
    """How one loader's samples are compared across ranks."""

    level: Level
    why: str  # the phrase the summaries carry: how identity was established, or why it was not
    lists: dict[int, np.ndarray] = field(default_factory=dict)  # per rank, epoch 0, comparable ids
    n: int = 0  # number of distinct ids the loader can reach

    @property
    def by_index(self) -> bool:
        return self.level is not Level.FINGERPRINTS

    @property
    def tag(self) -> str:
        return f"by root index: {self.why}" if self.by_index else f"by content: {self.why}"


def identify(loader: Loader) -> Basis:
    """How the ranks' samples can be compared: by index when the same data is established."""
    recs = loader.per_rank
    meta = loader.meta
    if meta.iterable:
        return Basis(Level.FINGERPRINTS, "an IterableDataset has no sample indices")
    if any(r.epochs[0].full is None for r in recs.values()):
        return Basis(Level.FINGERPRINTS, "the sampler's indices could not be listed")
    if any(r.epochs[0].keys is None or r.reachable is None for r in recs.values()):
        return Basis(Level.FINGERPRINTS, f"the indices of {meta.chain} could not be traced to a root dataset")
    for rank, r in sorted(recs.items()):
        if len(r.roots) != len(meta.roots):
            return Basis(Level.FINGERPRINTS, f"ranks {min(recs)} and {rank} read through different datasets")
        for mine, theirs in zip(meta.roots, r.roots, strict=True):
            if mine.anchors is None or theirs.anchors is None:
                return Basis(Level.FINGERPRINTS, f"the anchor samples of {mine.describe()} could not be read")
            if (mine.kind, mine.length) != (theirs.kind, theirs.length):
                return Basis(
                    Level.FINGERPRINTS,
                    f"ranks {min(recs)} and {rank} hold different data, {mine.describe()} and {theirs.describe()}",
                )
            if not mine.same_as(theirs):
                return Basis(
                    Level.FINGERPRINTS, f"the anchor samples of {mine.describe()} differ between ranks {min(recs)} and {rank}"
                )
    roots = " + ".join(r.describe() for r in meta.roots)
    if len({r.image_digest for r in recs.values()}) == 1:
        lists = {rank: _known(r.epochs[0].full) for rank, r in recs.items()}
        return Basis(Level.INDICES, f"same {roots} on every rank", lists, meta.dataset_len or 0)
    universe = distinct_keys(np.concatenate([_known(r.reachable) for r in recs.values()]))
    lists = {rank: np.searchsorted(universe, _known(r.epochs[0].keys)) for rank, r in recs.items()}
    return Basis(Level.ROOTS, f"same {roots} on every rank, through per-rank {meta.chain}", lists, int(universe.size))


def _known(a: np.ndarray | None) -> np.ndarray:
    assert a is not None  # identify() checked every rank's arrays first
    return a


# -- verdict helpers ---------------------------------------------------------------------------


Verdict = tuple[Status, str, list[str], "str | None", "str | None"]  # status, summary, evidence, rule, fix


def _padding(loader: Loader, world: int) -> int:
    """Repeats a distributed sampler adds to even out ranks (drop_last=False); for one that
    evens them out by whatever it yields, the samples yielded beyond those the loader reaches."""
    meta = loader.meta
    if meta.num_replicas != world:
        return 0
    if meta.padding is not None:
        return meta.padding
    b = loader.basis
    return max(0, sum(a.size for a in b.lists.values()) - b.n) if b.by_index else 0


def _documented_drops(loader: Loader, world: int, n: int) -> tuple[int, list[str]]:
    meta = loader.meta
    drops, why = 0, []
    if meta.num_replicas == world and meta.sampler_drop_last and n % world:
        drops += n % world
        why.append(f"DistributedSampler(drop_last=True) drops {n % world} (len {n} % {world} ranks)")
    if meta.batch_drop_last:
        batch_drops = sum(
            max(0, (r.sampler_len or 0) - len(r.epochs[0].full)) for r in loader.per_rank.values() if r.epochs[0].full is not None
        )
        if batch_drops:
            drops += batch_drops
            why.append(f"drop_last=True drops {batch_drops} (last partial batch per rank)")
    return drops, why


def _own_repeats(loader: Loader, batches: int) -> float:
    """The largest share of a rank's samples whose content it reads more than once itself (in
    the first batches): what identical content across ranks must be weighed against."""
    shares = []
    for lrec in loader.per_rank.values():
        fps = [fp for batch in lrec.epochs[0].fingerprints[:batches] for fp in batch]
        if fps:
            shares.append(1 - len(set(fps)) / len(fps))
    return max(shares, default=0.0)


def _unstable_content(loader: Loader, name: str, pairs, batches: int, b: Basis) -> Verdict | None:
    """A dataset whose content does not follow the index: the indices prove nothing, the
    content decides, against each rank's own repeat rate."""
    if not pairs or all(r.index_stable is not False for r in loader.meta.roots):
        return None
    own = _own_repeats(loader, batches)
    ratio = pairs[0][3]
    if ratio < _CONTENT_FAIL_RATIO or ratio <= 2 * own + 0.1:
        return None
    lines = [_pair_line(p, f"samples in the first {batches} batches", "received identical content for") for p in pairs[:3]]
    lines.append(
        f"the same index read twice gave different content: the dataset does not follow the index, "
        f"so disjoint indices ({b.tag}) do not make disjoint data; each rank repeats {own:.0%} of its own"
    )
    return (
        Status.FAIL,
        f"{name}: the ranks train on the same samples although their indices differ ({lines[0]})",
        lines[1:],
        "DDP201",
        "seed each rank's random draws differently (torch.manual_seed(base_seed + rank)), or make __getitem__ "
        "depend on its index",
    )


def _fingerprints(loader: Loader, batches: int | None = None) -> dict[int, set[str]]:
    out = {}
    for rank, lrec in loader.per_rank.items():
        fps = lrec.epochs[0].fingerprints
        out[rank] = {fp for batch in fps[:batches] for fp in batch}
    return out


def _fingerprint_pairs(fps: dict[int, set[str]]) -> list[tuple[int, int, int, float]]:
    ranks = sorted(fps)
    pairs = []
    for i, a in enumerate(ranks):
        for b in ranks[i + 1 :]:
            both = len(fps[a] & fps[b])
            if both:
                pairs.append((a, b, both, both / max(1, min(len(fps[a]), len(fps[b])))))
    return sorted(pairs, key=lambda p: -p[3])


def _pair_line(pair: tuple[int, int, int, float], unit: str, verb: str = "read the same") -> str:
    a, b, both, ratio = pair
    return f"ranks {a} and {b} {verb} {ratio:.0%} of {unit} ({both} shared)"


def _result(check: str, per_loader: list[Verdict], empty: str, data: list[dict]) -> CheckResult:
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


def _overlap(loader: Loader, name: str, lines: list[str], ratio: float, b: Basis) -> Verdict:
    meta, tag = loader.meta, b.tag
    if not loader.training:
        return (
            Status.WARN,
            (f"{name}: every rank reads the same samples ({ratio:.0%} overlap, {tag}); work repeated on every rank"),
            lines,
            None,
            "give this loader a DistributedSampler(shuffle=False) and reduce the metric",
        )
    if meta.iterable:
        fix = "shard the IterableDataset by rank (torch.distributed.get_rank()/get_world_size()) in __iter__"
    elif not b.by_index:
        fix = (
            "build the dataset the same way on every rank and shard it with DistributedSampler, or make "
            "the per-rank datasets disjoint"
        )
    elif meta.chain != meta.dataset or len(meta.roots) != 1:
        fix = "build the same dataset on every rank (a split with the same seed everywhere) and shard it with DistributedSampler"
    elif meta.num_replicas is not None:
        fix = "build the DistributedSampler with the real num_replicas and rank (or let it read them)"
    else:
        fix = "pass sampler=DistributedSampler(dataset) to the DataLoader"
    head = lines[0] if lines else "ranks read the same samples"
    return (Status.FAIL, f"{name}: {head} ({tag})", lines[1:], "DDP201", fix)


# -- the checks ------------------------------------------------------------------------------


def check_disjoint(loaders: list[Loader], world: int, base: str) -> CheckResult:
    out: list[Verdict] = []
    data = []
    for loader in loaders:
        if len(loader.per_rank) < 2:
            continue
        meta, name, b = loader.meta, loader.name(base), loader.basis
        item: dict[str, object] = {"site": loader.site, "level": b.level.value, "basis": b.why}
        wrong = _misbuilt_sampler(loader, world)
        if wrong:
            out.append(
                (
                    Status.FAIL,
                    f"{name}: {wrong[0]}",
                    wrong[1:],
                    "DDP201",
                    "build the DistributedSampler with the process group's world size and rank (or let it "
                    "read them from the process group)",
                )
            )
            item["misbuilt_sampler"] = True
            data.append(item)
            continue
        if b.by_index and meta.replacement:
            draws = loader.shared_draws
            item.update(shared_draws=draws.observed, expected_shared_draws=round(draws.expected, 1), pair=[draws.a, draws.b])
            out.append(_drawn_with_replacement(loader, name, draws, b))
        elif b.by_index:
            audit = loader.audit
            within = sum(repeats(a) for a in b.lists.values())
            across = audit.duplicates - within
            pad = _padding(loader, world)
            item.update(duplicates=across, padding=pad, pairs=[list(p) for p in audit.pairs])
            if across == 0:
                out.append((Status.PASS, f"{name}: ranks read disjoint samples ({b.tag})", [], None, None))
            elif across <= pad:
                out.append(_padded(meta, name, across, world, b))
            else:
                lines = [_pair_line(p, "sample indices") for p in audit.pairs[:3]]
                out.append(_overlap(loader, name, lines, audit.pairs[0][3] if audit.pairs else 1.0, b))
        else:
            pairs = _fingerprint_pairs(_fingerprints(loader))
            item["pairs"] = [list(p) for p in pairs]
            out.append(_by_content(loader, name, pairs, _padding(loader, world), "", b))
        data.append(item)
    return _result(DATA_DISJOINT, out, "fewer than two ranks iterated any DataLoader", data)


@dataclass
class SharedDraws:
    """Draws two ranks have in common (pairs of equal indices), against what independent draws
    from the same weights would give."""

    a: int
    b: int
    observed: int
    expected: float

    @property
    def excessive(self) -> bool:
        return self.observed > 2 * self.expected + 5 * self.expected**0.5 + 5


def _shared_draws(loader: Loader) -> SharedDraws:
    """The most excessive pair of ranks. Independent draws of ka and kb samples share about
    ka*kb*q equal pairs, q being the chance two draws hit the same sample; each rank's own
    repeats estimate q whatever the sampler's weights (at least 1/n: uniform)."""
    b = loader.basis
    counts = {r: np.bincount(np.asarray(a, dtype=np.int64), minlength=b.n) for r, a in b.lists.items()}
    own_pairs = sum(float(c @ (c - 1)) / 2 for c in counts.values())
    possible = sum(len(a) * (len(a) - 1) / 2 for a in b.lists.values())
    q = max(own_pairs / possible if possible else 0.0, 1 / max(b.n, 1))
    worst = None
    ranks = sorted(counts)
    for i, ra in enumerate(ranks):
        for rb in ranks[i + 1 :]:
            ca, cb = counts[ra], counts[rb]
            size = min(ca.size, cb.size)
            pair = SharedDraws(ra, rb, int(ca[:size] @ cb[:size]), len(b.lists[ra]) * len(b.lists[rb]) * q)
            if worst is None or pair.observed - pair.expected > worst.observed - worst.expected:
                worst = pair
    assert worst is not None  # (two ranks at least)
    return worst


def _drawn_with_replacement(loader: Loader, name: str, draws: SharedDraws, b: Basis) -> Verdict:
    counts = (
        f"ranks {draws.a} and {draws.b} share {draws.observed} draws, independent draws would share about {draws.expected:.0f}"
    )
    if not draws.excessive:
        return (Status.PASS, f"{name}: the ranks draw independently with replacement ({counts}; {b.tag})", [], None, None)
    return (
        Status.FAIL,
        f"{name}: the ranks draw the same samples with replacement ({counts}; {b.tag})",
        [],
        "DDP201",
        "seed each rank's sampler differently (a generator seeded with a base seed plus the rank), or shard the data by rank",
    )


def _misbuilt_sampler(loader: Loader, world: int) -> list[str]:
    """A training loader's distributed sampler built for another world or rank than its process's:
    wrong on its own evidence, whatever the data happens to hold (unseeded random data differs
    per rank and would pass by content)."""
    if not loader.training:
        return []  # an evaluation loader may be read whole by every rank on purpose
    wrong = [
        (rank, r.num_replicas, r.sampler_rank)
        for rank, r in sorted(loader.per_rank.items())
        if r.num_replicas is not None and (r.num_replicas != world or (r.sampler_rank is not None and r.sampler_rank != rank))
    ]
    if not wrong:
        return []
    sampler = loader.meta.sampler or "the distributed sampler"
    lines = [f"rank {rank}: num_replicas={replicas}, rank={srank}" for rank, replicas, srank in wrong[:4]]
    head = (
        f"{sampler} was built with num_replicas and rank that differ from the process group's "
        f"({world} ranks) on rank(s) {', '.join(str(w[0]) for w in wrong)}"
    )
    return [head, *lines]


def _padded(meta: LoaderRecord, name: str, repeats: int, world: int, b: Basis) -> Verdict:
    if meta.padding is None:  # a shard of batches per process
        why = f"{meta.sampler} evens out the ranks' batches with samples from the start"
        fix = "even_batches=False (accelerate), or a dataset length divisible by world size x batch size"
    else:
        why = f"len {meta.dataset_len} % {world} ranks; {meta.sampler} repeats samples to even out ranks"
        fix = "use drop_last=True in the DistributedSampler, or a dataset length divisible by the world size"
    return (
        Status.WARN,
        f"{name}: {repeats} padding duplicate(s) per epoch ({why})",
        [b.tag],
        None,
        f"{fix}, if the repeats matter",
    )


def _by_content(
    loader: Loader, name: str, pairs, allowed: int, window: str, b: Basis, disjoint_by_index: bool = False
) -> Verdict:
    """The verdict from identical samples across ranks (`window`: " in the first N batches")."""
    shared, tag = sum(p[2] for p in pairs), b.tag
    lines = [_pair_line(p, f"samples{window}", "received identical content for") for p in pairs[:3]]
    if pairs and pairs[0][3] >= _CONTENT_FAIL_RATIO and not disjoint_by_index:
        return _overlap(loader, name, lines, pairs[0][3], b)
    if shared > allowed:
        why = (
            "duplicates in the data: the ranks read different indices"
            if disjoint_by_index
            else "duplicates in the data, or a partial overlap"
        )
        return (Status.WARN, f"{name}: {shared} identical sample(s) across ranks{window} ({why}; {tag})", lines, None, None)
    return (Status.PASS, f"{name}: no identical samples across ranks{window} ({tag})", [], None, None)


def check_duplicates(loaders: list[Loader], world: int, base: str) -> CheckResult:
    """Samples one rank reads twice in an epoch: by the sampler's indices where there are
    indices, else by content."""
    out: list[Verdict] = []
    data = []
    for loader in loaders:
        meta, name = loader.meta, loader.name(base)
        if meta.replacement:
            out.append((Status.SKIP, f"{name}: samples with replacement, repeats are by design", [], None, None))
            continue
        by_rank: dict[int, tuple[int, int]] = {}  # rank -> (repeats, samples)
        indexed = all(r.epochs[0].full is not None for r in loader.per_rank.values())
        for rank, r in sorted(loader.per_rank.items()):
            e = r.epochs[0]
            if e.full is not None:
                by_rank[rank] = (repeats(e.full), int(e.full.size))
            else:
                fps = [fp for batch in e.fingerprints for fp in batch]
                by_rank[rank] = (len(fps) - len(set(fps)), len(fps))
        allowed = _padding(loader, world) if indexed else 0
        rank, (worst_repeats, samples) = max(by_rank.items(), key=lambda kv: kv[1][0] / max(1, kv[1][1]))
        data.append(
            {
                "site": loader.site,
                "level": "indices" if indexed else "fingerprints",
                "ranks": [{"rank": k, "repeats": v[0], "samples": v[1]} for k, v in sorted(by_rank.items())],
                "padding": allowed,
            }
        )
        share = worst_repeats / max(1, samples)
        how = "by index" if indexed else "by content"
        if worst_repeats == 0:
            out.append((Status.PASS, f"{name}: no rank reads a sample twice in an epoch ({how})", [], None, None))
        elif worst_repeats <= allowed:
            out.append(
                (
                    Status.PASS,
                    (f"{name}: rank {rank} reads {worst_repeats} sample(s) twice, the {meta.sampler}'s padding ({how})"),
                    [],
                    None,
                    None,
                )
            )
        elif indexed or share >= _CONTENT_FAIL_RATIO:
            cause, fix = _repeat_cause(meta, indexed)
            out.append(
                (
                    Status.FAIL,
                    (
                        f"{name}: rank {rank}: {worst_repeats} of its {samples} samples in epoch 0 "
                        f"are repeats ({share:.0%}, {how}): {cause}"
                    ),
                    [],
                    None,
                    fix,
                )
            )
        else:
            out.append(
                (
                    Status.WARN,
                    (
                        f"{name}: rank {rank} received {worst_repeats} identical sample(s) among "
                        f"{samples} ({how}: duplicates in the data, or a partial repeat)"
                    ),
                    [],
                    None,
                    None,
                )
            )
    return _result(DATA_DUPLICATES, out, "no DataLoader was iterated", data)


def _repeat_cause(meta: LoaderRecord, indexed: bool) -> tuple[str, str]:
    if indexed:
        return (
            f"{meta.sampler} yields the same index more than once per epoch",
            "make the sampler yield each index once per epoch (or sample with replacement on purpose)",
        )
    if meta.iterable and meta.num_workers > 1:
        return (
            (
                f"each of the {meta.num_workers} DataLoader workers yields the same samples; the "
                f"IterableDataset does not split its stream with torch.utils.data.get_worker_info()"
            ),
            (
                "in __iter__, after sharding by rank, keep every num_workers-th sample from "
                "get_worker_info().id (or shard files by worker)"
            ),
        )
    return ("the dataset yields the same samples more than once per epoch", "make the dataset yield each sample once per epoch")


def check_coverage(loaders: list[Loader], world: int, base: str, steps: int) -> CheckResult:
    out: list[Verdict] = []
    data = []
    for loader in loaders:
        meta, name = loader.meta, loader.name(base)
        if len(loader.per_rank) < world:
            continue
        if meta.replacement:
            out.append((Status.SKIP, f"{name}: samples with replacement, coverage is not defined", [], None, None))
            continue
        b = loader.basis
        if b.by_index:
            audit = loader.audit
            drops, why = _documented_drops(loader, world, b.n)
            covered, n = audit.covered, audit.n
        else:
            verdict, counted = _coverage_by_content(loader, name, world, steps, b)
            if counted is None:
                out.append(verdict)
                continue
            covered, n, drops, why = counted
        missing = n - covered
        data.append(
            {
                "site": loader.site,
                "level": b.level.value,
                "dataset_len": n,
                "covered": covered,
                "missing": missing,
                "documented_drops": drops,
            }
        )
        how = "by root index" if b.by_index else "by content"
        if missing == 0:
            out.append(
                (
                    Status.PASS,
                    f"{name}: the ranks together read all {n} samples per epoch ({how})",
                    [] if b.by_index else [b.tag],
                    None,
                    None,
                )
            )
        elif missing <= drops:
            out.append((Status.INFO, (f"{name}: {missing} of {n} samples dropped per epoch (drop_last=True)"), why, None, None))
        else:
            out.append(
                (
                    Status.FAIL,
                    (f"{name}: {missing - drops} of {n} samples are read by no rank in an epoch ({b.tag})"),
                    why,
                    None,
                    ("shard one dataset with DistributedSampler (it covers every sample), or fix the custom split"),
                )
            )
    return _result(DATA_COVERAGE, out, "no DataLoader was iterated by every rank", data)


def _coverage_by_content(loader: Loader, name: str, world: int, steps: int, b: Basis):
    """Coverage of a loader without comparable indices: measurable only when its length is
    known and every rank read epoch 0 to its end within the audit."""
    meta = loader.meta
    n = meta.dataset_len
    if n is None:
        what = "the IterableDataset" if meta.iterable else f"{meta.dataset}"
        return (Status.SKIP, f"{name}: coverage not measurable: {what} has no len()", [b.tag], None, None), None
    if not all(r.epochs[0].exhausted for r in loader.per_rank.values()):
        return (
            Status.SKIP,
            (
                f"{name}: coverage not measurable: epoch 0 was cut at --steps {steps} batches "
                f"before its end (raise --steps to read it whole)"
            ),
            [b.tag],
            None,
            None,
        ), None
    seen = set().union(*_fingerprints(loader).values())
    if len(seen) > n:
        return (
            Status.SKIP,
            (
                f"{name}: coverage not measurable: len() is {n} but the ranks received "
                f"{len(seen)} different samples (a per-rank length?)"
            ),
            [b.tag],
            None,
            None,
        ), None
    drops, why = 0, []
    if meta.batch_drop_last and meta.batch_size:
        streams = world * max(1, meta.num_workers) if meta.iterable else world
        drops = streams * (meta.batch_size - 1)
        why.append(
            f"drop_last=True drops up to {meta.batch_size - 1} per rank"
            + (" and worker" if meta.iterable and meta.num_workers > 1 else "")
        )
    return None, (len(seen), n, drops, why)


def check_content(loaders: list[Loader], world: int, base: str, batches: int) -> CheckResult:
    out: list[Verdict] = []
    data = []
    for loader in loaders:
        if len(loader.per_rank) < 2:
            continue
        name, b = loader.name(base), loader.basis
        pairs = _fingerprint_pairs(_fingerprints(loader, batches))
        unstable = _unstable_content(loader, name, pairs, batches, b) if b.by_index else None
        if unstable is not None:
            data.append({"site": loader.site, "batches": batches, "pairs": [list(p) for p in pairs], "index_stable": False})
            out.append(unstable)
            continue
        disjoint = False
        if b.by_index and loader.meta.replacement and not loader.shared_draws.excessive:
            data.append({"site": loader.site, "batches": batches, "pairs": [list(p) for p in pairs]})
            out.append(
                (
                    Status.PASS,
                    f"{name}: identical samples across ranks only as often as independent draws with replacement give ({b.tag})",
                    [],
                    None,
                    None,
                )
            )
            continue
        if b.by_index:  # the indices decide; identical content at distinct indices is in the data
            audit = loader.audit
            disjoint = audit.duplicates - sum(repeats(a) for a in b.lists.values()) <= _padding(loader, world)
        data.append({"site": loader.site, "batches": batches, "pairs": [list(p) for p in pairs]})
        out.append(_by_content(loader, name, pairs, _padding(loader, world), f" in the first {batches} batches", b, disjoint))
    return _result(DATA_CONTENT, out, "fewer than two ranks iterated any DataLoader", data)


def _order(epoch) -> np.ndarray | None:
    if epoch.full is not None:
        return np.asarray(epoch.full)
    if epoch.drawn:
        return np.asarray([i for batch in epoch.drawn for i in batch], dtype=object)
    return None


def check_set_epoch(loaders: list[Loader], base: str) -> CheckResult:
    out: list[Verdict] = []
    data = []
    for loader in loaders:
        meta, name = loader.meta, loader.name(base)
        if meta.iterable:
            continue
        same_on, compared = [], 0
        for rank, lrec in sorted(loader.per_rank.items()):
            eps = lrec.epochs
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
        calls = [c.value for c in meta.set_epoch]
        shown = ", ".join(f"set_epoch({v})" for v in calls[:4]) + (" ..." if len(calls) > 4 else "")
        data.append({"site": loader.site, "same_order_ranks": same_on, "set_epoch_calls": calls, "shuffle": meta.shuffle})
        sampler = meta.sampler
        if not same_on:
            why = f" ({shown})" if calls else ""
            out.append((Status.PASS, f"{name}: the order changes between epochs{why}", [], None, None))
        elif not meta.shuffle:
            out.append((Status.PASS, f"{name}: same order every epoch; the sampler does not shuffle", [], None, None))
        elif not calls:
            out.append(
                (
                    Status.FAIL,
                    (
                        f"{name}: same order in epoch 0 and epoch 1 on rank(s) "
                        f"{_ranks(same_on)}: {sampler}.set_epoch() is never called"
                    ),
                    [],
                    "DDP202",
                    "call sampler.set_epoch(epoch) at the start of every epoch",
                )
            )
        elif len(set(map(str, calls))) == 1:
            out.append(
                (
                    Status.FAIL,
                    (
                        f"{name}: same order in epoch 0 and epoch 1 on rank(s) "
                        f"{_ranks(same_on)}: {sampler}.set_epoch() is always called with {calls[0]!r}"
                    ),
                    [f"calls seen: {shown}"],
                    "DDP204",
                    "pass the epoch number: sampler.set_epoch(epoch)",
                )
            )
        else:
            out.append(
                (
                    Status.FAIL,
                    (
                        f"{name}: same order in epoch 0 and epoch 1 on rank(s) "
                        f"{_ranks(same_on)} although set_epoch was called ({shown})"
                    ),
                    [],
                    None,
                    None,
                )
            )
    return _result(DATA_SET_EPOCH, out, "no map-style DataLoader ran two epochs on a rank", data)


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


DATA_CHECKS = ids("data")  # in report order


def data_checks(records: dict[int, RankRecord], world: int, base: str, steps: int) -> list[CheckResult]:
    loaders = loaders_of(records)
    return [
        check_disjoint(loaders, world, base),
        check_duplicates(loaders, world, base),
        check_coverage(loaders, world, base, steps),
        check_content(loaders, world, base, steps),
        check_set_epoch(loaders, base),
    ]

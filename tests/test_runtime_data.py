"""The data audit identifies samples by their root dataset and root index, through Subsets,
random_split, batch samplers and workers; where it cannot, by content, and says which.

Each situation and its twin runs `python -m ddplint --runtime --format json` under the real
torchrun (gloo, 2 processes on CPU); the chain-following parts also run in-process."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from test_runtime_audit import Run, assert_report_shape, launch  # noqa: E402
from torch.utils.data import (  # noqa: E402
    BatchSampler,
    ChainDataset,
    ConcatDataset,
    DataLoader,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

from ddplint.runtime.dataprobe import DatasetChain, SamplerChain, read_anchors  # noqa: E402

DATA = ("data.disjoint", "data.duplicates", "data.coverage", "data.content", "data.set_epoch")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runtime-data")
    cache: dict[tuple, Run] = {}

    def get(fixture: str, *script_args: str) -> Run:
        key = (fixture, script_args)
        if key not in cache:
            cache[key] = launch(base, fixture, script_args=script_args)
            assert_report_shape(cache[key])
        return cache[key]

    return get


def data_status(run: Run) -> dict[str, str]:
    return {c["check"]: c["status"] for c in run.report["checks"] if c["check"] in DATA}


def loader_data(run: Run, check: str) -> dict:
    [item] = run.check(check)["data"]["loaders"]
    return item


# -- a Subset per rank, shuffled by the DataLoader --------------------------------------------


def test_subset_per_rank_is_disjoint_by_root_index(runs):
    run = runs("data_subset_by_rank.py")
    assert data_status(run) == dict.fromkeys(DATA, "PASS")
    disjoint = run.check("data.disjoint")
    assert (
        "ranks read disjoint samples (by root index: same TensorDataset of 256 on every rank, "
        "through per-rank Subset(TensorDataset))" in disjoint["summary"]
    )
    assert loader_data(run, "data.disjoint")["level"] == "roots"
    assert loader_data(run, "data.coverage")["covered"] == 256
    assert run.proc.returncode == 0


def test_the_same_subset_on_every_rank_fails(runs):
    run = runs("data_subset_by_rank.py", "--same-subset")
    assert data_status(run)["data.disjoint"] == "FAIL"
    disjoint = run.check("data.disjoint")
    assert disjoint["rule"] == "DDP201"
    assert "ranks 0 and 1 read the same 100% of sample indices (128 shared) (by root index" in disjoint["summary"]
    assert loader_data(run, "data.disjoint")["level"] == "indices"  # one Subset, the same on every rank
    assert run.proc.returncode == 1


def test_concat_of_per_rank_subsets_is_disjoint_by_root_index(runs):
    run = runs("data_subset_by_rank.py", "--concat")
    assert data_status(run) == dict.fromkeys(DATA, "PASS")
    assert (
        "(by root index: same TensorDataset of 256 + TensorDataset of 64 on every rank" in run.check("data.disjoint")["summary"]
    )
    assert loader_data(run, "data.coverage")["covered"] == 320  # both roots, through the offsets


def test_concat_of_the_same_subsets_on_every_rank_fails(runs):
    run = runs("data_subset_by_rank.py", "--concat", "--same-subset")
    c = run.check("data.disjoint")
    assert c["status"] == "FAIL" and "read the same 100% of sample indices (160 shared)" in c["summary"]


# -- random_split twice (a nested Subset), then DistributedSampler ----------------------------


def test_random_split_with_one_seed_passes(runs):
    run = runs("data_random_split.py")
    assert data_status(run) == dict.fromkeys(DATA, "PASS")
    assert run.report["loaders"][0]["chain"] == "Subset(Subset(TensorDataset))"
    assert loader_data(run, "data.coverage")["covered"] == 288


def test_random_split_seeded_by_rank_fails_by_root_index(runs):
    run = runs("data_random_split.py", "--seed-by-rank")
    status = data_status(run)
    assert status["data.disjoint"] == "FAIL" and status["data.coverage"] == "FAIL"
    disjoint = run.check("data.disjoint")
    assert (
        "by root index: same TensorDataset of 400 on every rank, through per-rank "
        "Subset(Subset(TensorDataset))" in disjoint["summary"]
    )
    assert "same dataset on every rank" in disjoint["fix"]
    item = loader_data(run, "data.disjoint")
    assert item["level"] == "roots" and item["duplicates"] > item["padding"] == 0
    coverage = loader_data(run, "data.coverage")
    assert coverage["missing"] > 0 and coverage["dataset_len"] > 288  # the union of both ranks' splits
    assert run.proc.returncode == 1


# -- a DistributedSampler inside a batch sampler -----------------------------------------------


@pytest.mark.parametrize(
    "shape,sampler,batch_sampler",
    [
        ("batch_sampler", "DistributedSampler", "BatchSampler"),
        ("lists", "DistributedSampler", "BatchSampler"),
        ("subclass", "EpochSampler", "GroupedBatches"),
    ],
)
def test_distributed_sampler_in_a_batch_sampler_pads_and_is_reshuffled(runs, shape, sampler, batch_sampler):
    run = runs("data_batch_sampler.py", "--shape", shape)
    assert data_status(run) == {
        "data.disjoint": "WARN",
        "data.duplicates": "PASS",
        "data.coverage": "PASS",
        "data.content": "PASS",
        "data.set_epoch": "PASS",
    }
    assert "1 padding duplicate(s) per epoch (len 101 % 2 ranks" in run.check("data.disjoint")["summary"]
    [loader] = run.report["loaders"]
    assert (loader["sampler"], loader["batch_sampler"]) == (sampler, batch_sampler)
    assert loader["set_epoch_calls"][:2] == [0, 1]
    assert run.proc.returncode == 0


def test_batch_sampler_without_set_epoch_fails(runs):
    run = runs("data_batch_sampler.py", "--no-set-epoch")
    assert data_status(run)["data.set_epoch"] == "FAIL"
    c = run.check("data.set_epoch")
    assert c["rule"] == "DDP202" and "DistributedSampler.set_epoch() is never called" in c["summary"]


# -- an IterableDataset read by two workers ----------------------------------------------------


def test_iterable_dataset_not_split_across_workers_fails_naming_get_worker_info(runs):
    run = runs("data_iterable_workers.py")
    status = data_status(run)
    assert status["data.duplicates"] == "FAIL" and status["data.disjoint"] == "PASS"
    c = run.check("data.duplicates")
    assert "24 of its 48 samples in epoch 0 are repeats (50%, by content)" in c["summary"]
    assert "get_worker_info()" in c["summary"] and "get_worker_info()" in c["fix"]
    coverage = run.check("data.coverage")  # a known length, read whole within the audit
    assert coverage["status"] == "PASS" and "all 48 samples" in coverage["summary"]
    assert run.proc.returncode == 1


def test_iterable_dataset_split_across_workers_passes(runs):
    run = runs("data_iterable_workers.py", "--split-workers")
    assert data_status(run) == {**dict.fromkeys(DATA, "PASS"), "data.set_epoch": "SKIP"}
    assert loader_data(run, "data.coverage") == {
        "site": f"{run.script}:36",
        "level": "fingerprints",
        "dataset_len": 48,
        "covered": 48,
        "missing": 0,
        "documented_drops": 0,
    }


def test_iterable_dataset_without_length_coverage_is_not_measurable(runs):
    run = runs("iterable_sharded.py")
    c = run.check("data.coverage")
    assert c["status"] == "SKIP" and "coverage not measurable: the IterableDataset has no len()" in c["summary"]


# -- a dataset of the project's own that indexes another: compared by content ------------------


def test_custom_view_disjoint_passes_by_content(runs):
    run = runs("data_custom_view.py")
    status = data_status(run)
    assert status["data.disjoint"] == "PASS" and status["data.content"] == "PASS"
    summary = run.check("data.disjoint")["summary"]
    assert "(by content: the anchor samples of RankView of 128 differ between ranks 0 and 1)" in summary
    assert loader_data(run, "data.disjoint")["level"] == "fingerprints"
    assert "not measurable: epoch 0 was cut at --steps 8" in run.check("data.coverage")["summary"]
    assert run.proc.returncode == 0


def test_custom_view_overlapping_fails_by_content(runs):
    run = runs("data_custom_view.py", "--overlap")
    c = run.check("data.disjoint")
    assert c["status"] == "FAIL" and c["rule"] == "DDP201"
    assert "ranks 0 and 1 received identical content for 75% of samples (96 shared) (by content:" in c["summary"]
    assert run.proc.returncode == 1


# -- the chains, in-process ----------------------------------------------------------------------


def test_nested_subsets_and_concat_map_to_root_keys():
    ds = TensorDataset(torch.arange(20))
    other = TensorDataset(torch.arange(100, 105))
    train, _ = random_split(ds, [12, 8], generator=torch.Generator().manual_seed(1))
    inner, _ = random_split(train, [6, 6], generator=torch.Generator().manual_seed(2))
    top = ConcatDataset([inner, Subset(other, [4, 0]), ds])
    chain = DatasetChain(top)
    assert chain.text == "ConcatDataset[Subset(Subset(TensorDataset)), Subset(TensorDataset), TensorDataset]"
    assert chain.roots == [ds, other]  # ds once, though reached twice
    keys = chain.keys(top, np.arange(len(top), dtype=np.int64))
    values = [int(top[i][0]) for i in range(len(top))]
    # key = offset of the root (ds: 0, other: 20) + index inside it
    assert [k if k < 20 else 100 + k - 20 for k in keys] == values


def test_chain_dataset_lists_its_iterable_roots():
    class Stream(IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n

    a, b = Stream(3), Stream(4)
    chain = DatasetChain(ChainDataset([a, b]))
    assert chain.text == "ChainDataset[Stream, Stream]" and chain.roots == [a, b]
    assert read_anchors(a, 3) == (None, None)  # no index into a stream


def test_sampler_chain_finds_the_distributed_sampler_in_every_shape():
    ds = TensorDataset(torch.arange(11))
    dist = DistributedSampler(ds, num_replicas=2, rank=0)
    shapes = [
        DataLoader(ds, batch_sampler=BatchSampler(dist, 4, False)),
        DataLoader(ds, sampler=BatchSampler(dist, 4, True), batch_size=None),
        DataLoader(ds, sampler=dist, batch_size=4),
    ]
    for loader in shapes:
        chain = SamplerChain(loader)
        assert chain.distributed is dist and chain.element is dist and chain.padding(11) == 1
    assert [SamplerChain(loader).drop_last for loader in shapes] == [False, True, False]


def test_anchors_agree_under_random_augmentation_and_leave_the_rng_alone():
    class Noisy(TensorDataset):
        def __getitem__(self, i):
            return super().__getitem__(i)[0] + torch.randn(1)

    ds = Noisy(torch.zeros(10))
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first, stable = read_anchors(ds, 10)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(7)  # another rank's seed
    assert read_anchors(ds, 10) == (first, stable) and first is not None and len(first) == 5
    assert stable is False  # random noise: the same index read twice differs
    assert read_anchors(TensorDataset(torch.arange(10.0)), 10)[1] is True


def test_a_loader_the_probe_cannot_read_still_runs(tmp_path):
    """The probe observes; a batch sampler whose attributes raise is left unaudited, not broken."""
    import subprocess
    import sys

    from test_runtime_audit import env

    script = tmp_path / "hostile.py"
    script.write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "from ddplint.runtime.dataprobe import LoaderTracker\n"
        "LoaderTracker(8, 2, (), lambda *a, **k: None, lambda: None).install()\n"
        "class Batches:\n"
        "    @property\n"
        "    def sampler(self):\n"
        "        raise RuntimeError('no sampler here')\n"
        "    def __iter__(self):\n"
        "        return iter([[0, 1], [2, 3]])\n"
        "    def __len__(self):\n"
        "        return 2\n"
        "loader = DataLoader(TensorDataset(torch.arange(4)), batch_sampler=Batches())\n"
        "print([b[0].tolist() for b in loader])\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[0, 1], [2, 3]]"

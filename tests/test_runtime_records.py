"""The rank record: what the probe writes as plain data is read back into types in one place,
and no key the probe or its hooks write is lost on the way."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from ddplint.runtime import probe  # noqa: E402
from ddplint.runtime.checks import binding, comm, rank  # noqa: E402
from ddplint.runtime.datarecords import EpochRecord, LoaderRecord, RootData  # noqa: E402
from ddplint.runtime.perfrecords import MemPeak, PerfRecord, StepSample, StepTimes  # noqa: E402
from ddplint.runtime.plain import from_plain  # noqa: E402
from ddplint.runtime.records import (  # noqa: E402
    AllReduce,
    Backend,
    BindingFacts,
    CommFacts,
    ErrorSite,
    GpuIdentity,
    NvmlView,
    RankError,
    RankInfo,
    RankRecord,
    Versions,
    Write,
)


def _names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_a_whole_record_round_trips_through_plain_data():
    np = pytest.importorskip("numpy")
    loader = LoaderRecord(
        "t.py:9", "TensorDataset", 8, False, "TensorDataset", [RootData("torch.TensorDataset", 8, ["a1"], True)],
        "DistributedSampler", None, True, False, 2, 1, False, 0, 4, 2, False, True, 0,
        reachable=np.arange(8), epochs=[EpochRecord(0, np.arange(4), np.arange(4), [[1, 3]], [["f1", "f2"]], 1)],
        training=True,
    )  # fmt: skip
    record = RankRecord(
        rank=1,
        local_rank=1,
        world_size=2,
        node="n0",
        pid=42,
        status="raised",
        error=RankError("KeyError", "KeyError: 'x'", "Traceback ...", 1.5, ErrorSite("t.py", 7, "main", "x = d['x']")),
        backend=Backend("nccl", "gloo", "gloo"),
        init_called=True,
        info=RankInfo(
            "n0",
            42,
            {"RANK": "1", "GROUP_RANK": "0"},
            Versions(python="3.11.7", torch="2.4.1", packages=["torch==2.4.1"]),
            NvmlView("550.54.15", 12040, 1, ["GPU-1"], [{"name": "H100", "capability": [9, 0]}], 450.0, "NVLink"),
            [400.0],
        ),
        comm=CommFacts("gloo", 1, 2, "cpu", AllReduce(True, 0.01, 3.0, 3.0), [{"bytes": 1024, "busbw_gbps": 1.0}]),
        binding=BindingFacts("cuda", True, True, 1, GpuIdentity(1, "H100", 80 * 2**30, "GPU-1", "00000000:19:00.0")),
        loaders={"t.py:9": loader},
        training_site="t.py:9",
        perf=PerfRecord(mem=MemPeak(1, 2, 3), times=StepTimes([StepSample(0, 1, 0.1, 0.2, at=5.0)])),
        writes=[Write("/w/ckpt.pt", "torch.save", "t.py:12", at=[0, 2])],
        kept={"/w/ckpt.pt": "/run/kept/0"},
        elapsed_s=3.5,
    )
    back = RankRecord.from_plain(dataclasses.asdict(record))
    assert isinstance(back.loaders["t.py:9"], LoaderRecord) and isinstance(back.binding.gpu, GpuIdentity)
    assert back.loaders["t.py:9"].epochs[0].full.tolist() == [0, 1, 2, 3]  # arrays stay arrays
    back.loaders["t.py:9"].epochs[0].full = loader.epochs[0].full  # (== on arrays is elementwise)
    back.loaders["t.py:9"].epochs[0].keys = loader.epochs[0].keys
    back.loaders["t.py:9"].reachable = loader.reachable
    assert back == record
    assert (back.where, back.training_loader) == ("node 0 (n0)", loader)


def test_a_hook_that_raised_a_record_cut_short_and_a_newer_probe_still_read():
    rec = RankRecord.from_plain(
        {
            "rank": 1,
            "info": {"error": "RuntimeError: boom"},
            "comm": {},
            "binding": {"error": "AttributeError: x"},
            "perf": None,  # the rank stopped before its steps were timed
            "a_key_of_a_newer_probe": 1,
        }
    )
    assert rec.info == RankInfo(error="RuntimeError: boom") and rec.where == "?"
    assert not rec.comm.ran and not rec.binding.reached and rec.perf == PerfRecord()
    assert rec.error is None and rec.backend is None and rec.training_loader is None


def _keys_written(source: str) -> set[str]:
    """Every key the probe sets on its record: record["key"] = ... and its first dict."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            target = node.value
            if isinstance(target, ast.Attribute) and target.attr == "record" and isinstance(node.slice, ast.Constant):
                keys.add(node.slice.value)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute) and node.target.attr == "record":
            assert isinstance(node.value, ast.Dict)
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return keys


def test_every_key_the_probe_writes_is_a_field_of_the_record():
    keys = _keys_written(Path(probe.__file__).read_text())
    assert {"rank", "status", "error", "info", "comm", "binding", "perf", "writes", "loaders"} <= keys
    assert keys <= _names(RankRecord)


def test_what_the_real_hooks_return_is_read_into_their_parts(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    info = rank.collect_rank_info()
    assert set(info) <= _names(RankInfo) and set(info["versions"]) <= _names(Versions)
    if "error" not in info["nvml"]:
        assert set(info["nvml"]) <= _names(NvmlView)
    typed = from_plain(RankInfo, info)
    assert typed.versions is not None and typed.versions.torch == str(torch.__version__)

    placed = binding.binding_info([], [], [])  # no GPU here: the rank runs on the CPU
    assert set(placed) <= _names(BindingFacts)
    assert from_plain(BindingFacts, placed).reached

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        measured = comm.measure()
    finally:
        dist.destroy_process_group()
    assert set(measured) <= _names(CommFacts) and set(measured["allreduce"]) <= _names(AllReduce)
    facts = from_plain(CommFacts, measured)
    assert facts.ran and facts.allreduce is not None and facts.allreduce.ok and facts.world_size == 1

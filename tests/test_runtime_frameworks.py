"""Frameworks run unchanged under the audit: Lightning re-creates the script's DataLoader from
DataLoader's constructor signature, accelerate's prepare() replaces its sampler with a shard of
batches per process. Each is a small real script under `python -m ddplint --runtime` (real
torchrun, gloo, 2 processes on CPU); the data checks must judge the loader the framework
iterates, named at the script's own DataLoader line."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from test_runtime_audit import Run, assert_report_shape, launch  # noqa: E402

DATA = ("data.disjoint", "data.duplicates", "data.coverage", "data.content", "data.set_epoch")


def status(run: Run) -> dict[str, str]:
    names = (*DATA, "io.single_writer", "run.failure", "run.hang")
    return {c["check"]: c["status"] for c in run.report["checks"] if c["check"] in names}


def test_lightning_ddp_runs_and_its_distributed_sampler_is_audited(tmp_path):
    pytest.importorskip("lightning")
    run = launch(tmp_path, "data_lightning.py")
    assert_report_shape(run)
    assert status(run) == dict.fromkeys(status(run), "PASS"), run.report["checks"]
    [loader] = run.report["loaders"]
    assert loader["site"] == f"{run.script}:24"  # the script's DataLoader(...), not Lightning's copy
    assert loader["training"] and loader["sampler"] == "DistributedSampler"  # the one Lightning injected
    assert loader["set_epoch_calls"][:2] == [0, 1] and loader["epochs_seen"] == 2
    assert [r["status"] for r in run.report["ranks"]] == ["stopped", "stopped"]
    assert run.proc.returncode == 0


def test_accelerate_prepare_is_audited_and_only_the_main_process_saves(tmp_path):
    pytest.importorskip("accelerate")
    run = launch(tmp_path, "data_accelerate.py")
    assert_report_shape(run)
    assert status(run) == {**dict.fromkeys(status(run), "PASS"), "data.disjoint": "WARN"}
    disjoint = run.check("data.disjoint")
    assert "6 padding duplicate(s) per epoch (BatchSamplerShard evens out the ranks' batches" in disjoint["summary"]
    [loader] = run.report["loaders"]
    assert loader["site"] == f"{run.script}:15" and loader["training"]
    assert (loader["sampler"], loader["batch_sampler"]) == ("BatchSamplerShard", "BatchSamplerShard")
    [written] = run.check("io.single_writer")["data"]["paths"]
    assert written["ranks"] == [0]  # accelerator.is_main_process holds on rank 0 alone
    assert [r["status"] for r in run.report["ranks"]] == ["stopped", "stopped"]
    assert run.proc.returncode == 0

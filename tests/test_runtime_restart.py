"""ckpt.restart (--resume-args): the script restarted from its first checkpoint, compared with
the run that went on. Real audits under torchrun (gloo, 2 CPU processes) of one script that
saves at each epoch's end, resumed faithfully and resumed in two broken ways; then the verdicts
on records built by hand, for what a run cannot show cheaply."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import rank_records

from ddplint.runtime.checks.restart import RestartRun, check_restart, failure_of, first_versions
from ddplint.runtime.sandbox import MAP, put_back
from ddplint.runtime.verdict import Status

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "fixtures" / "runtime" / "resumable.py"


def restart_audit(tmp_path: Path, resume_args: str) -> tuple[int, dict]:
    pytest.importorskip("torch")
    from test_runtime_audit import report_schema

    shutil.copy(SCRIPT, tmp_path / "resumable.py")
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint", "--runtime", "--format", "json", "--output", str(out), "--steps", "5",
         "--epochs", "2", "--resume-args", resume_args, "resumable.py"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=300,
        cwd=tmp_path,
        check=False,
    )  # fmt: skip
    assert out.exists(), proc.stderr
    report = json.loads(out.read_text())
    jsonschema.validate(report, report_schema())
    [check] = [c for c in report["checks"] if c["check"] == "ckpt.restart"]
    assert not (tmp_path / "ckpt").exists()  # both jobs wrote in the sandbox only
    return proc.returncode, check


def test_a_faithful_resume_goes_on_with_the_next_batch_and_the_same_weights(tmp_path):
    code, check = restart_audit(tmp_path, "--resume ckpt/last.pt")
    assert code == 0
    assert check["status"] == "PASS", check
    assert check["summary"] == (
        "the restart from ckpt/last.pt went on with the batch and the weights the run had there (2 rank(s) compared)"
    )
    assert check["data"]["compared_ranks"] == 2
    for rank in (0, 1):
        assert (
            f"rank {rank}: saved after epoch 0 batch 5, the run went on with epoch 1 batch 1; "
            "the restart began with epoch 1 batch 1"
        ) in check["evidence"]
    losses = [line for line in check["evidence"] if "first loss" in line]
    assert len(losses) == 2
    for line in losses:  # same weights, same batch, no randomness in the step: the same loss
        after, before = line.split("first loss ")[1].split(" after the restart, ")
        assert after == before.split(" in the run")[0]


def test_a_resume_that_forgets_the_epoch_starts_again_from_the_first_batch(tmp_path):
    code, check = restart_audit(tmp_path, "--resume ckpt/last.pt --forget-epoch")
    assert code == 0  # a WARN
    assert check["status"] == "WARN", check
    assert check["summary"] == (
        "the restart with --resume-args '--resume ckpt/last.pt --forget-epoch': ranks 0, 1 resumed from the "
        "very start, not at epoch 1 batch 1: the epoch counter or the sampler's epoch was not restored from "
        "the checkpoint"
    )
    assert "set_epoch" in check["fix"]


def test_a_resume_that_does_not_load_the_weights_is_seen_by_them(tmp_path):
    code, check = restart_audit(tmp_path, "--resume ckpt/last.pt --fresh-weights")
    assert check["status"] == "WARN", check
    assert "ranks 0, 1 began with model weights other than those the run had at that batch" in check["summary"]
    assert "the restart began with epoch 1 batch 1" in check["evidence"][1]  # the data position was right


def test_a_restart_that_raises_fails_the_audit(tmp_path):
    code, check = restart_audit(tmp_path, "--resume missing.pt")
    assert code == 1
    assert check["status"] == "FAIL", check
    # both ranks raise; whichever torchrun saw first is named (the other may be stopped first)
    assert re.match(
        r"the restart with --resume-args '--resume missing\.pt' failed: rank [01] raised FileNotFoundError: ",
        check["summary"],
    ), check
    assert "resumable.py:" in check["summary"]


# -- verdicts on hand-built records ------------------------------------------------------------


def _loader(batches_per_epoch: list[list[list[int]]]) -> dict:
    epochs = [{"drawn": batches, "yielded": len(batches)} for batches in batches_per_epoch]
    return {
        "site": "t.py:1", "dataset": "D", "dataset_len": 8, "iterable": False, "chain": "D", "roots": [],
        "sampler": "DistributedSampler", "batch_sampler": None, "shuffle": True, "replacement": False,
        "num_replicas": 1, "sampler_rank": 0, "sampler_drop_last": False, "padding": 0, "sampler_len": 8,
        "batch_size": 2, "batch_drop_last": False, "batched": True, "num_workers": 0, "epochs": epochs,
        "training": True,
    }  # fmt: skip


def _record(batches, steps, *, writes=(), kept=None, loaded=()) -> dict:
    return {
        "status": "stopped",
        "training_site": "t.py:1",
        "loaders": {"t.py:1": _loader(batches)},
        "writes": list(writes),
        "kept": kept or {},
        "perf": {"times": {"steps": steps}, "loaded": list(loaded)},
    }


def _step(epoch, step, weights, loss=1.0) -> dict:
    return {"epoch": epoch, "step": step, "wait_s": 0.0, "rest_s": 0.0, "loss": loss, "weights": weights}


REF = rank_records(
    {
        0: _record(
            [[[0, 1], [2, 3]], [[4, 5], [6, 7]]],
            [_step(0, 1, [1.0]), _step(0, 2, [2.0]), _step(1, 1, [3.0]), _step(1, 2, [4.0])],
            writes=[{"path": "/w/ckpt.pt", "op": "torch.save", "site": "t.py:9", "at": [0, 2]}],
            kept={"/w/ckpt.pt": "/run/kept/rank-0/0"},
        )
    }
)[0]


def _again(first_batch, weights, loaded=("/w/ckpt.pt",)) -> RestartRun:
    rec = _record([[first_batch]], [_step(0, 1, weights)], loaded=loaded)
    return RestartRun(("--resume", "/w/ckpt.pt"), rank_records({0: rec}), restored=("/w/ckpt.pt",))


def test_restart_verdicts_from_records():
    assert check_restart({0: REF}, _again([4, 5], [3.0]), "/w").status is Status.PASS
    wrong = check_restart({0: REF}, _again([2, 3], [3.0]), "/w")  # a batch further on than the run went
    assert wrong.status is Status.WARN and "rank 0 resumed at epoch 0 batch 2, not at epoch 1 batch 1" in wrong.summary
    weights = check_restart({0: REF}, _again([4, 5], [1.0]), "/w")
    assert weights.status is Status.WARN and "rank 0 began with model weights other than" in weights.summary
    unmatched = check_restart({0: REF}, _again([9, 9], [3.0]), "/w")  # a batch the run never drew: not judged
    assert unmatched.status is Status.INFO
    assert "a batch the run never drew (not compared)" in unmatched.evidence[1]
    other = check_restart({0: REF}, _again([4, 5], [3.0], loaded=("/w/pretrained.pt",)), "/w")
    assert other.status is Status.WARN
    assert other.summary == (
        "the restart with --resume-args '--resume /w/ckpt.pt' read none of the checkpoints the run saved "
        "(it loaded pretrained.pt)"
    )


def test_restart_not_asked_or_not_possible_is_a_skip():
    assert check_restart({0: REF}, None, "/w").status is Status.SKIP
    skipped = check_restart({0: REF}, RestartRun(("--resume", "x"), skipped="several nodes: ..."), "/w")
    assert skipped.status is Status.SKIP and skipped.summary == "several nodes: ..."


def test_failure_and_first_versions_of_records():
    error = {"type": "KeyError", "message": "KeyError: 'epoch'", "text": "...", "t": 1.0}
    raised = {"status": "raised", "error": {**error, "site": {"file": "t.py", "line": 7, "function": "main"}}}
    stopped = {"status": "stopped"}
    assert failure_of(rank_records({0: raised, 1: stopped}), 2) == "rank 0 raised KeyError: 'epoch' at t.py:7"
    assert failure_of(rank_records({0: stopped}), 2) == "rank(s) 1 never reported (the restart failed or hung)"
    assert failure_of(rank_records({0: stopped, 1: stopped}), 2) is None
    both = {1: {"kept": {"/a": "k1", "/b": "k1b"}}, 0: {"kept": {"/a": "k0"}}}
    assert first_versions(rank_records(both)) == {"/a": "k0", "/b": "k1b"}  # the lowest rank's copy first


def test_put_back_writes_the_first_version_into_the_covering_upper_layer(tmp_path):
    layers, root = tmp_path / "layers", tmp_path / "project"
    (root / "sub").mkdir(parents=True)
    (layers / "0" / "upper" / "ckpt").mkdir(parents=True)
    (layers / "1" / "upper").mkdir(parents=True)
    (layers / MAP).write_text(json.dumps([[str(root), "0"], [str(root / "sub"), "1"]]))
    (layers / "0" / "upper" / "ckpt" / "last.pt").write_text("epoch 1")
    first = tmp_path / "kept"
    first.write_text("epoch 0")
    assert put_back(layers, str(root / "ckpt" / "last.pt"), str(first))
    assert (layers / "0" / "upper" / "ckpt" / "last.pt").read_text() == "epoch 0"
    assert put_back(layers, str(root / "sub" / "w.pt"), str(first))  # the innermost layer covers it
    assert (layers / "1" / "upper" / "w.pt").read_text() == "epoch 0"
    assert not put_back(layers, str(tmp_path / "elsewhere.pt"), str(first))
    assert not (root / "ckpt").exists()  # the real directory is never touched

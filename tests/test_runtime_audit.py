"""End to end: `python -m ddplint --runtime` on the fixtures, under the real torchrun (gloo, 2
processes on CPU). Each fixture is launched once per module; the tests read its JSON report."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "runtime"
OURS = ("data.disjoint", "data.coverage", "data.content", "data.set_epoch", "io.single_writer", "run.failure", "run.hang")


def mapped() -> str:
    """What the report's first line adds on a machine without a GPU (CUDA mapped to the CPU)."""
    import torch

    return "" if torch.cuda.is_available() else ", CUDA mapped to the CPU"


def report_schema() -> dict:
    doc = (ROOT / "docs" / "runtime-json.md").read_text()
    return json.loads(re.search(r"```json\n(.*?)```", doc, re.S).group(1))


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    return e


def tree(path: Path) -> dict[str, str]:
    """Every file and directory under `path`, with a digest of each file's bytes."""
    out = {}
    for p in sorted(path.rglob("*")):
        out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def processes_naming(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmd:
                found.append(int(entry))
    return found


class Run:
    def __init__(
        self,
        workdir: Path,
        script: Path,
        proc: subprocess.CompletedProcess,
        wall: float,
        report: dict | None,
        before: dict,
        after: dict,
    ):
        self.workdir, self.script, self.proc, self.wall = workdir, script, proc, wall
        self.report, self.before, self.after = report, before, after

    def status(self) -> dict[str, str]:
        return {c["check"]: c["status"] for c in self.report["checks"] if c["check"] in OURS}

    def check(self, name: str) -> dict:
        return next(c for c in self.report["checks"] if c["check"] == name)

    def story(self) -> str:
        """Every check that did not pass and the end of stderr: an assertion message that tells
        why a rare failure happened, read from the one run that had it."""
        lines = [f"{c['check']} {c['status']}: {c['summary']}" for c in self.report["checks"] if c["status"] != "PASS"]
        return "\n".join(lines + ["stderr:", self.proc.stderr[-3000:]])


def launch(base: Path, fixture: str, *options: str, script_args: tuple[str, ...] = (), prepare=None, fmt: str = "json") -> Run:
    """Copy the fixture into a directory of its own and audit it there (cwd = that directory)."""
    workdir = Path(tempfile.mkdtemp(prefix=fixture[:-3] + "-", dir=base))
    script = workdir / fixture
    shutil.copy(FIXTURES / fixture, script)
    if prepare:
        prepare(workdir)
    before = tree(workdir)
    out = workdir.with_suffix(".json")
    cmd = [sys.executable, "-m", "ddplint", "--runtime", *options]
    if fmt == "json":
        cmd += ["--format", "json", "--output", str(out)]
    cmd += [str(script)]
    if script_args:
        cmd += ["--", *script_args]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=workdir, env=env(), capture_output=True, text=True, timeout=200)
    wall = time.monotonic() - start
    report = json.loads(out.read_text()) if fmt == "json" and out.exists() else None
    return Run(workdir, script, proc, wall, report, before, tree(workdir))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runtime")
    cache: dict[tuple, Run] = {}

    def get(fixture: str, *options: str, **kw) -> Run:
        key = (fixture, options, kw.get("script_args", ()), kw.get("fmt", "json"))
        if key not in cache:
            cache[key] = launch(base, fixture, *options, **kw)
        return cache[key]

    return get


def assert_report_shape_without_progress(run: Run) -> None:
    assert run.report is not None, run.proc.stderr
    jsonschema.validate(run.report, report_schema())
    has_fail = any(c["status"] == "FAIL" for c in run.report["checks"])
    assert run.report["exit_code"] == int(has_fail)
    assert run.proc.returncode == run.report["exit_code"], run.proc.stderr
    assert run.proc.stdout == ""  # the report went to --output; progress is on stderr
    assert "ddplint: launching torchrun: 2 processes" in run.proc.stderr
    assert run.after == run.before, "the audit changed the script's directory"
    assert processes_naming(str(run.workdir)) == []


def assert_report_shape(run: Run) -> None:
    assert_report_shape_without_progress(run)
    assert re.search(r"2/2 ranks reporting: rank 0 (first batch|step|epoch end|finished)", run.proc.stderr)


def test_correct_script_passes_every_check(runs):
    run = runs("correct.py")
    assert_report_shape(run)
    assert run.status() == {
        "data.disjoint": "PASS",
        "data.coverage": "PASS",
        "data.content": "PASS",
        "data.set_epoch": "PASS",
        "io.single_writer": "PASS",
        "run.failure": "PASS",
        "run.hang": "PASS",
    }
    train, val = run.report["loaders"]  # the shuffling loader is the training one
    assert train["training"] and train["sampler"] == "DistributedSampler" and train["shuffle"]
    assert train["site"] == f"{run.script}:18" and train["epochs_seen"] == 2
    assert train["set_epoch_calls"][:2] == [0, 1]
    # the evaluation loader (one worker process) ran in both epochs, not counted as training
    assert val["site"] == f"{run.script}:20" and not val["training"] and val["epochs_seen"] == 2
    assert [(w["path"], w["change"], w["seen_by_probe"]) for w in run.report["writes"]] == [
        (str(run.workdir / "checkpoint.pt"), "created", True)
    ]
    assert run.report["writes"][0]["ranks"] == [0]
    assert {c["check"]: c["status"] for c in run.report["checks"]}["io.sandbox"] == "PASS"
    assert [r["status"] for r in run.report["ranks"]] == ["stopped", "stopped"]
    assert run.report["launch"]["backend"] == "gloo" and run.report["launch"]["world_size"] == 2


def test_no_distributed_sampler(runs):
    run = runs("no_sampler.py")
    assert_report_shape(run)
    assert run.status() == {
        "data.disjoint": "FAIL",
        "data.coverage": "PASS",
        "data.content": "FAIL",
        "data.set_epoch": "PASS",
        "io.single_writer": "PASS",
        "run.failure": "PASS",
        "run.hang": "PASS",
    }
    disjoint = run.check("data.disjoint")
    assert disjoint["rule"] == "DDP201"
    assert "no_sampler.py:13" in disjoint["summary"]
    assert "ranks 0 and 1 read the same 100% of sample indices" in disjoint["summary"]
    assert run.check("data.content")["rule"] == "DDP201"
    assert run.proc.returncode == 1


def test_set_epoch_missing(runs):
    run = runs("set_epoch_missing.py")
    assert_report_shape(run)
    assert run.status() == {
        "data.disjoint": "PASS",
        "data.coverage": "PASS",
        "data.content": "PASS",
        "data.set_epoch": "FAIL",
        "io.single_writer": "PASS",
        "run.failure": "PASS",
        "run.hang": "PASS",
    }
    c = run.check("data.set_epoch")
    assert c["rule"] == "DDP202" and "never called" in c["summary"]
    assert "DistributedSampler" in c["summary"] and "set_epoch_missing.py:13" in c["summary"]
    assert c["data"]["loaders"][0]["same_order_ranks"] == [0, 1]


def test_set_epoch_constant(runs):
    run = runs("set_epoch_constant.py")
    assert_report_shape(run)
    assert run.status()["data.set_epoch"] == "FAIL"
    assert {k: v for k, v in run.status().items() if k != "data.set_epoch"} == dict.fromkeys(
        ["data.disjoint", "data.coverage", "data.content", "io.single_writer", "run.failure", "run.hang"], "PASS"
    )
    c = run.check("data.set_epoch")
    assert c["rule"] == "DDP204" and "always called with 0" in c["summary"]
    assert c["data"]["loaders"][0]["set_epoch_calls"][:2] == [0, 0]


def test_unsharded_iterable_dataset_is_caught_by_content(runs):
    run = runs("iterable_unsharded.py")
    assert_report_shape(run)
    assert run.status() == {
        "data.disjoint": "FAIL",
        "data.coverage": "SKIP",
        "data.content": "FAIL",
        "data.set_epoch": "SKIP",
        "io.single_writer": "PASS",
        "run.failure": "PASS",
        "run.hang": "PASS",
    }
    c = run.check("data.content")
    assert c["rule"] == "DDP201" and "100%" in c["summary"] and "IterableDataset" in c["fix"]
    assert run.check("data.disjoint")["data"]["loaders"][0]["level"] == "fingerprints"


def test_checkpoint_by_every_rank_fails_and_touches_nothing(runs):
    original = b"the user's own checkpoint, not to be touched\n"

    def prepare(workdir: Path) -> None:
        (workdir / "checkpoint.pt").write_bytes(original)

    run = runs("checkpoint_every_rank.py", prepare=prepare)
    assert_report_shape(run)
    assert (run.workdir / "checkpoint.pt").read_bytes() == original
    assert not (run.workdir / "logs").exists()
    assert run.status() == {
        "data.disjoint": "PASS",
        "data.coverage": "PASS",
        "data.content": "PASS",
        "data.set_epoch": "PASS",
        "io.single_writer": "FAIL",
        "run.failure": "PASS",
        "run.hang": "PASS",
    }
    c = run.check("io.single_writer")
    assert c["rule"] == "DDP301"
    shared = {p["path"]: p for p in c["data"]["paths"]}
    ckpt, log = str(run.workdir / "checkpoint.pt"), str(run.workdir / "logs" / "train.log")
    assert shared[ckpt]["ranks"] == [0, 1] and shared[ckpt]["ops"] == ["torch.save"]
    assert shared[log]["ranks"] == [0, 1] and shared[log]["ops"] == ["open:a"]
    assert shared[ckpt]["sites"] == [f"{run.script}:29"]


def test_odd_length_padding_is_a_counted_warning(runs):
    run = runs("odd_length.py")
    assert_report_shape(run)
    assert run.status() == {
        "data.disjoint": "WARN",
        "data.coverage": "PASS",
        "data.content": "PASS",
        "data.set_epoch": "PASS",
        "io.single_writer": "PASS",
        "run.failure": "PASS",
        "run.hang": "PASS",
    }
    c = run.check("data.disjoint")
    assert "1 padding duplicate" in c["summary"] and "len 101 % 2 ranks" in c["summary"]
    assert c["data"]["loaders"][0]["duplicates"] == 1 and c["data"]["loaders"][0]["padding"] == 1


def test_odd_length_drop_last_is_info(runs):
    run = runs("odd_length.py", script_args=("--drop-last",))
    assert_report_shape(run)
    assert run.status() == {
        "data.disjoint": "PASS",
        "data.coverage": "INFO",
        "data.content": "PASS",
        "data.set_epoch": "PASS",
        "io.single_writer": "PASS",
        "run.failure": "PASS",
        "run.hang": "PASS",
    }
    c = run.check("data.coverage")
    assert "1 of 101 samples dropped" in c["summary"]
    assert c["data"]["loaders"][0] == {
        "site": f"{run.script}:20",
        "level": "indices",
        "dataset_len": 101,
        "covered": 100,
        "missing": 1,
        "documented_drops": 1,
    }


def test_rank_that_raises(runs):
    run = runs("raises.py")
    assert_report_shape(run)
    assert run.status() == {  # every rank still reports what it recorded of epoch 0
        "data.disjoint": "PASS",
        "data.coverage": "PASS",
        "data.content": "PASS",
        "data.set_epoch": "SKIP",
        "io.single_writer": "PASS",
        "run.failure": "FAIL",
        "run.hang": "PASS",
    }
    c = run.check("run.failure")
    assert c["summary"] == "rank 1 raised ValueError: corrupt batch on rank 1 at raises.py:11 in check_batch"
    assert c["evidence"][0].strip() == 'raise ValueError("corrupt batch on rank 1")'
    first = c["data"]["ranks"][0]
    assert first["rank"] == 1 and first["site"]["line"] == 11 and "Traceback" in first["text"]
    statuses = {r["rank"]: r["status"] for r in run.report["ranks"]}
    assert statuses[1] == "raised" and statuses[0] in ("raised", "terminated")  # rank 0: a consequence


def test_hardcoded_nccl_runs_with_forced_gloo(runs):
    run = runs("hardcoded_nccl.py", "--backend", "gloo")
    assert_report_shape(run)
    assert set(run.status().values()) == {"PASS"}
    assert [r["backend"] for r in run.report["ranks"]] == ["gloo", "gloo"]


def test_argparse_arguments_after_double_dash(runs):
    out = "ckpts"
    run = runs(
        "with_args.py", script_args=("--epochs", "3", "--batch-size", "8", "--samples", "96", "--lr", "0.05", "--out", out)
    )
    assert_report_shape(run)
    assert set(run.status().values()) == {"PASS"}
    assert run.report["script_args"] == ["--epochs", "3", "--batch-size", "8", "--samples", "96", "--lr", "0.05", "--out", out]
    [loader] = run.report["loaders"]
    assert loader["batch_size"] == 8 and loader["dataset_len"] == 96
    # the job's copy-on-write layer: the directory and both checkpoints, created by rank 0
    assert [(w["path"], w["change"], w["type"], w["ranks"]) for w in run.report["writes"]] == [
        (str(run.workdir / out), "created", "dir", [0]),
        *[(str(run.workdir / out / f"epoch{e}.pt"), "created", "file", [0]) for e in (0, 1)],
    ]


def test_text_report(runs):
    run = runs("correct.py", fmt="text")
    assert run.proc.returncode in (0, 1)
    lines = run.proc.stdout.splitlines()
    assert lines[0].startswith(f"ddplint runtime audit: correct.py  (2 ranks, gloo{mapped()}, 2 epochs x 8 steps,")
    for name in OURS:
        assert re.search(rf"^PASS  {re.escape(name)} +\S", run.proc.stdout, re.M), name
    assert re.match(r"^(\d+ \w+, )*\d+ PASS(, \d+ SKIP)?$", lines[-1])


def test_bad_script_arguments_quote_argparse(runs):
    run = runs("with_args.py", script_args=("--epochs", "x", "--out", "ckpts"))
    assert_report_shape_without_progress(run)
    c = run.check("run.failure")
    assert c["status"] == "FAIL"
    assert re.fullmatch(r"rank [01] raised SystemExit: 2 at with_args\.py:19 in main", c["summary"])
    assert "    with_args.py: error: argument --epochs: invalid int value: 'x'" in c["evidence"]


def test_sharded_iterable_dataset_passes_by_content(runs):
    run = runs("iterable_sharded.py")
    assert_report_shape(run)
    assert run.status() == {
        "data.disjoint": "PASS",
        "data.coverage": "SKIP",
        "data.content": "PASS",
        "data.set_epoch": "SKIP",
        "io.single_writer": "PASS",
        "run.failure": "PASS",
        "run.hang": "PASS",
    }
    assert run.check("data.disjoint")["data"]["loaders"][0] == {
        "site": f"{run.script}:22",
        "level": "fingerprints",
        "basis": "an IterableDataset has no sample indices",
        "pairs": [],
    }


def test_rank_killed_by_a_signal_is_the_root_cause(runs):
    """Rank 0 fails in all_reduce once rank 1 is gone; the report names rank 1's SIGKILL, as torchrun does."""
    run = runs("killed.py")
    assert_report_shape_without_progress(run)
    c = run.check("run.failure")
    assert c["status"] == "FAIL"
    assert c["summary"].startswith("rank 1 was killed by SIGKILL, often the kernel's out-of-memory killer")
    assert "dmesg" in c["fix"]
    assert c["data"]["killed"] == [{"rank": 1, "signal": "SIGKILL", "exit_status": -9}]
    assert all(r["rank"] == 0 for r in c["data"]["ranks"])  # rank 0's error is listed as a consequence
    assert {r["rank"]: r["status"] for r in run.report["ranks"]}[1] == "missing"


def test_rank_that_raises_is_not_taken_for_a_killed_one(runs):
    """The twin: torchrun's SIGTERM to the survivor after a real error is not a root cause."""
    c = runs("raises.py").check("run.failure")
    assert "killed" not in c["data"] and c["summary"].startswith("rank 1 raised ValueError")


def test_nothing_audited_is_not_a_pass(runs):
    """No rank reached a DataLoader batch: the report says so first and exits 1."""
    run = runs("no_loader.py")
    assert_report_shape_without_progress(run)
    first = run.report["checks"][0]
    assert (first["check"], first["status"]) == ("run.reached", "FAIL")
    assert first["summary"].startswith("no rank reached a DataLoader batch")
    assert "--allow-no-data" in first["fix"]
    assert run.proc.returncode == 1 and run.check("run.failure")["status"] == "PASS"


def test_allow_no_data_makes_it_information(runs):
    run = runs("no_loader.py", "--allow-no-data")
    assert_report_shape_without_progress(run)
    assert run.check("run.reached")["status"] == "INFO" and run.proc.returncode == 0


def test_a_run_that_trained_reached_its_batches(runs):
    c = runs("correct.py").check("run.reached")
    assert c["status"] == "PASS" and c["data"]["loaders"] >= 1 and "batch(es)" in c["summary"]


def test_a_failed_run_does_not_add_a_second_failure(runs):
    """The killed rank is run.failure's to report; run.reached only notes what was not audited."""
    c = runs("killed.py").check("run.reached")
    assert c["status"] in ("PASS", "SKIP")  # rank 0 may have read its first batches before rank 1 died


def test_a_file_every_rank_writes_at_exit_is_seen(runs):
    """atexit handlers run while the probe records, as interpreter exit would run them."""
    c = runs("exit_summary.py").check("io.single_writer")
    assert c["status"] == "FAIL" and "summary.json" in c["summary"], c


def test_a_file_rank_0_writes_at_exit_is_a_single_writer(runs):
    c = runs("exit_summary.py", script_args=("--guarded",)).check("io.single_writer")
    assert c["status"] == "PASS" and "summary.json" in " ".join([c["summary"], *c["evidence"]]), c


def test_a_sampler_built_for_rank_0_on_every_rank_fails_on_its_own_evidence(runs):
    c = runs("sampler_rank_zero.py").check("data.disjoint")
    assert c["status"] == "FAIL" and c["rule"] == "DDP201", c
    assert "num_replicas and rank that differ from the process group's (2 ranks) on rank(s) 1" in c["summary"]
    assert c["evidence"] == ["rank 1: num_replicas=2, rank=0"]


def test_independent_draws_with_replacement_pass(runs):
    """Each rank's own WeightedRandomSampler: the ranks share draws only as chance predicts."""
    run = runs("weighted_per_rank.py")
    assert run.status()["data.disjoint"] == "PASS" and run.status()["data.content"] == "PASS", run.report
    c = run.check("data.disjoint")
    assert "draw independently with replacement" in c["summary"]
    item = c["data"]["loaders"][0]
    assert item["shared_draws"] < 2 * item["expected_shared_draws"] + 60


def test_the_same_draws_on_every_rank_fail(runs):
    run = runs("weighted_per_rank.py", script_args=("--same-seed",))
    c = run.check("data.disjoint")
    assert c["status"] == "FAIL" and c["rule"] == "DDP201" and "draw the same samples with replacement" in c["summary"]
    assert run.status()["data.content"] == "FAIL"


def test_a_batch_looked_at_before_set_epoch_is_not_an_epoch(runs):
    run = runs("peek_batch.py")
    c = run.check("data.set_epoch")
    assert c["status"] == "PASS" and "set_epoch(0), set_epoch(1)" in c["summary"], c


def test_a_dataset_that_ignores_the_index_is_judged_by_content(runs):
    """Random windows, the same seed on every rank: disjoint indices, identical batches."""
    c = runs("random_windows.py").check("data.content")
    assert c["status"] == "FAIL" and c["rule"] == "DDP201", c
    assert "the ranks train on the same samples although their indices differ" in c["summary"]
    assert c["evidence"][-1].startswith("the same index read twice gave different content")
    assert c["data"]["loaders"][0]["index_stable"] is False


def test_random_windows_seeded_by_rank_pass(runs):
    run = runs("random_windows.py", script_args=("--seed-by-rank",))
    assert run.status()["data.content"] == "PASS" and run.status()["data.disjoint"] == "PASS", run.report

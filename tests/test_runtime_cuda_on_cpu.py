"""A GPU training script audited unedited on a machine without a GPU: its CUDA placement runs on
the CPU, nccl becomes gloo, the data and I/O checks run, and the device each rank asked for is
still compared (cuda:0 on every rank is a FAIL)."""

from __future__ import annotations

import pytest
from test_runtime_audit import Run, assert_report_shape_without_progress, launch

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("cuda-on-cpu")
    cache: dict[tuple, Run] = {}

    def get(fixture: str, *options: str, **kw) -> Run:
        key = (fixture, options, kw.get("script_args", ()))
        if key not in cache:
            cache[key] = launch(base, fixture, *options, **kw)
        return cache[key]

    return get


def _gpu_visible() -> bool:
    import torch

    return torch.cuda.is_available()


pytestmark = pytest.mark.skipif(_gpu_visible(), reason="the mapping is automatic only without a GPU")


def test_a_gpu_script_is_audited_on_the_cpu(runs):
    run = runs("gpu_script.py")
    assert_report_shape_without_progress(run)
    assert run.report["launch"]["cuda_on_cpu"] is True and run.report["launch"]["backend"] == "gloo"
    assert "CUDA mapped to the CPU" in run.proc.stderr
    fails = [c["check"] for c in run.report["checks"] if c["status"] == "FAIL"]
    assert fails == [], fails
    status = {c["check"]: c["status"] for c in run.report["checks"]}
    for check in (
        "run.reached",
        "data.disjoint",
        "data.coverage",
        "data.set_epoch",
        "io.single_writer",
        "ckpt.resume",
        "run.failure",
        "bind.distinct",
    ):
        assert status[check] == "PASS", (check, run.check(check))
    assert run.check("bind.distinct")["summary"] == "2 ranks asked for 2 different GPUs (CUDA mapped to the CPU)"


def test_every_rank_on_cuda_0_still_fails_binding(runs):
    run = runs("gpu_script.py", script_args=("--gpu0",))
    c = run.check("bind.distinct")
    assert c["status"] == "FAIL" and c["rule"] == "DDP101", c
    assert c["summary"].startswith("ranks 0-1 share GPU cuda:0")
    assert run.check("data.disjoint")["status"] == "PASS"


def test_device_cuda_does_not_map(runs):
    """--device cuda: the script meets the machine as it is (this CPU build of torch fails at its first CUDA placement)."""
    run = runs("gpu_script.py", "--device", "cuda")
    assert run.report["launch"]["cuda_on_cpu"] is False
    c = run.check("run.failure")
    assert c["status"] == "FAIL" and c["data"]["ranks"][0]["site"]["line"] == 25  # .to(device): no CUDA in this torch


def test_workers_the_script_spawns_itself_are_audited_as_the_ranks(runs):
    """imagenet's --multiprocessing-distributed shape: the mapping, gloo and the step limit follow
    the script's own workers (which would otherwise fail on nccl, or train for 1000 epochs), and
    rank 0's workers are audited in the ranks' place: their data, writes, binding and group."""
    run = runs("spawns_own_workers.py")  # each of the 2 ranks sees 2 GPUs and spawns 2 workers
    assert_report_shape_without_progress(run)
    reached = run.check("run.reached")
    assert reached["status"] == "PASS", reached
    assert reached["data"]["audited_workers"] == 2
    assert "2 worker process(es) rank 0's script started itself (mp.spawn)" in reached["summary"]
    for name in ("data.disjoint", "data.set_epoch", "io.single_writer", "bind.distinct", "comm.allreduce"):
        assert run.check(name)["status"] == "PASS", run.story()
    assert "worker0.pt" in " ".join(run.check("io.single_writer")["evidence"])
    assert run.check("run.failure")["status"] == "PASS", run.check("run.failure")
    assert run.check("run.hang")["status"] == "PASS"  # stopped by the audit's limit, not the timeout
    assert run.proc.returncode == 0, run.proc.stderr[-2000:]


def test_mistakes_inside_the_scripts_own_workers_are_found(runs):
    """The twin: every worker binds cuda:0, reads the whole dataset and saves to one path."""
    run = runs("spawns_own_workers_twin.py")
    assert run.check("bind.distinct")["status"] == "FAIL", run.story()
    assert run.check("data.disjoint")["status"] == "FAIL", run.story()
    writer = run.check("io.single_writer")
    assert writer["status"] == "FAIL" and "model.pt" in writer["summary"], run.story()
    assert run.check("run.failure")["status"] == "PASS", run.story()
    assert run.proc.returncode == 1


def test_a_failing_worker_of_another_rank_is_named_by_its_own_error(runs):
    """Two ranks, each spawning 2 workers; only rank 1's worker 1 raises, before its sibling
    can fail on the lost connection. Rank 1's workers are not audited, so its failure comes as
    torch's ProcessRaisedException, whose message holds the worker's traceback: the report names
    the worker's ValueError and its line, never the exception torch wrapped it in. (Which of two
    failing ranks came first is a race; the unit tests cover both orders on hand-built records.)"""
    run = runs("spawned_worker_raises_on_rank_1.py")
    failure = run.check("run.failure")
    assert failure["status"] == "FAIL", run.story()
    worker_error = "ValueError: worker 1 cannot open its shard (in its worker 1, mp.spawn)"
    site = "spawned_worker_raises_on_rank_1.py:18 in worker"
    assert failure["summary"] == f"rank 1 raised {worker_error} at {site}", failure
    assert "ProcessRaisedException" not in failure["summary"]


def test_a_failing_worker_of_the_script_is_named_as_the_root_cause(runs):
    run = runs("spawned_worker_raises.py", "--nproc-per-node", "1")  # one rank: it spawns 2 workers
    failure = run.check("run.failure")
    assert failure["status"] == "FAIL", failure
    assert failure["summary"].startswith("worker 1 of rank 0's script (mp.spawn) raised ValueError: worker 1 cannot")
    assert failure["data"]["workers"][0]["site"]["line"] == 16
    assert run.proc.returncode == 1


def test_a_script_that_spawns_one_worker_per_gpu_is_audited_once_per_node(runs):
    """The tutorial's mp.spawn shape (one worker per GPU it sees) launched as it is meant to run,
    once per node: --mapped-gpus shows that one process two GPUs, and its two workers are the
    audited ranks."""
    run = runs("spawns_own_workers.py", "--nproc-per-node", "1", "--mapped-gpus", "2")
    assert run.report["launch"]["nproc_per_node"] == 1
    assert run.check("run.reached")["data"]["audited_workers"] == 2, run.story()
    for name in ("data.disjoint", "bind.distinct", "comm.allreduce", "run.failure"):
        assert run.check(name)["status"] == "PASS", run.story()
    assert run.check("bind.distinct")["summary"] == "2 ranks asked for 2 different GPUs (CUDA mapped to the CPU)"
    assert run.proc.returncode == 0, run.proc.stderr[-2000:]

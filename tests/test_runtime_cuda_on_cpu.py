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


def test_workers_the_script_spawns_itself_run_on_the_cpu_stop_and_are_named(runs):
    """imagenet's --multiprocessing-distributed shape: the mapping, gloo and the step limit follow
    the script's own workers (which would otherwise fail on nccl, or train for 1000 epochs), and
    the report says the training ran where the data checks did not look: nothing audited."""
    run = runs("spawns_own_workers.py")  # each of the 2 ranks sees 2 GPUs and spawns 2 workers
    assert_report_shape_without_progress(run)
    reached = run.check("run.reached")
    assert reached["status"] == "FAIL", reached
    assert "trained in 4 worker process(es) it started itself (mp.spawn)" in reached["summary"]
    assert reached["data"]["own_workers"] == 4
    assert run.check("run.failure")["status"] == "PASS", run.check("run.failure")
    assert run.check("run.hang")["status"] == "PASS"  # stopped by the audit's limit, not the timeout
    writer = run.check("io.single_writer")
    assert writer["status"] == "SKIP" and "not followed" in writer["summary"], writer
    assert run.proc.returncode == 1


def test_workers_the_script_spawns_itself_with_allow_no_data(runs):
    run = runs("spawns_own_workers.py", "--allow-no-data")
    assert run.check("run.reached")["status"] == "INFO"
    assert run.proc.returncode == 0, run.proc.stderr[-2000:]

"""A real deadlock under torchrun: reported within --timeout, with each rank's blocking call,
and no process left behind; the same cleanup when ddplint itself gets SIGINT or SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_runtime_audit import FIXTURES, env, processes_naming, report_schema

pytest.importorskip("torch")

TIMEOUT = 45  # the ranks must reach step 3 on a loaded machine before it runs out
MARGIN = 90  # interpreter start, stack dumps, kill and report, on a loaded 2-core machine


def copy_fixture(tmp_path: Path) -> Path:
    script = tmp_path / "deadlock.py"
    shutil.copy(FIXTURES / "deadlock.py", script)
    return script


def audit_until_timeout(script: Path, out: Path, *options: str) -> subprocess.CompletedProcess:
    """`ddplint --runtime --timeout TIMEOUT` of a script that hangs, JSON report to `out`."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            *options,
            "--timeout",
            str(TIMEOUT),
            "--format",
            "json",
            "--output",
            str(out),
            str(script),
        ],
        cwd=script.parent,
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT + 2 * MARGIN,
        check=False,
    )


def test_deadlock_is_reported_within_timeout_and_leaves_no_process(tmp_path):
    import jsonschema

    script = copy_fixture(tmp_path)
    out = tmp_path / "report.json"
    assert processes_naming(str(script)) == []
    start = time.monotonic()
    proc = audit_until_timeout(script, out)
    wall = time.monotonic() - start
    assert wall < TIMEOUT + MARGIN, wall
    assert processes_naming(str(script)) == []
    assert proc.returncode == 1, proc.stderr
    report = json.loads(out.read_text())
    jsonschema.validate(report, report_schema())
    checks = {c["check"]: c for c in report["checks"]}
    hang = checks["run.hang"]
    assert hang["status"] == "FAIL" and hang.get("rule") == "DDP401", hang
    assert hang["summary"].startswith(f"the ranks did not finish within {TIMEOUT}")
    ranks = {r["rank"]: r for r in hang["data"]["ranks"]}
    assert (ranks[0]["call"], ranks[0]["location"]) == ("recv", "deadlock.py:26")
    assert (ranks[1]["call"], ranks[1]["location"]) == ("barrier", "deadlock.py:28")
    assert ranks[0]["phase"] == ranks[1]["phase"] == "step" and ranks[0]["step"] == 3
    assert hang["evidence"][0] == (
        "rank 0: step 3 (epoch 0), waiting in recv() at deadlock.py:26: dist.recv(torch.zeros(1), src=1)"
    )
    assert checks["run.failure"]["status"] == "SKIP"
    assert [r["status"] for r in report["ranks"]] == ["hung", "hung"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_ddplint_stops_every_rank(tmp_path, sig):
    script = copy_fixture(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddplint", "--runtime", "--timeout", "120", str(script)],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(processes_naming(str(script))) < 4 and time.monotonic() < deadline:  # + torchrun, 2 ranks
            time.sleep(0.2)
        assert len(processes_naming(str(script))) >= 4
        time.sleep(1.0)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    assert f"interrupted ({signal.Signals(sig).name}); every process of the job was stopped" in err
    assert "Traceback" not in err
    assert out == ""
    assert processes_naming(str(script)) == []


def test_missing_node_is_a_rendezvous_hang_after_rdzv_timeout(tmp_path):
    """Node 0 of 2 alone: torchrun never gets past rendezvous; reported after --rdzv-timeout."""
    from ddplint.runtime.checks.ports import free_port

    script = tmp_path / "correct.py"
    shutil.copy(FIXTURES / "correct.py", script)
    out = tmp_path / "report.json"
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--nproc-per-node",
            "1",
            "--master-port",
            str(free_port()),
            "--rdzv-timeout",
            "4",
            "--format",
            "json",
            "--output",
            str(out),
            str(script),
        ],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert time.monotonic() - start < 4 + MARGIN
    assert proc.returncode == 1, proc.stderr
    checks = {c["check"]: c for c in json.loads(out.read_text())["checks"]}
    assert checks["run.hang"]["status"] == "FAIL"
    assert checks["run.hang"]["summary"] == "rendezvous did not complete within 4 s"
    assert checks["run.hang"]["evidence"] == ["rank 0: never started (rendezvous)", "rank 1: never started (rendezvous)"]
    assert processes_naming(str(script)) == []


def test_rank_that_never_reaches_init_is_an_init_hang(tmp_path):
    script = tmp_path / "late_init.py"
    shutil.copy(FIXTURES / "late_init.py", script)
    out = tmp_path / "report.json"
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            "--rdzv-timeout",
            "20",
            "--timeout",
            "120",
            "--format",
            "json",
            "--output",
            str(out),
            str(script),
        ],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert time.monotonic() - start < 20 + MARGIN  # rank start-up (torch import) comes first
    assert proc.returncode == 1, proc.stderr
    hang = next(c for c in json.loads(out.read_text())["checks"] if c["check"] == "run.hang")
    assert hang["status"] == "FAIL" and hang["summary"] == "init_process_group did not return within 20 s"
    ranks = {r["rank"]: r for r in hang["data"]["ranks"]}
    assert (ranks[0]["phase"], ranks[0]["location"]) == ("init", "late_init.py:17")
    assert (ranks[1]["phase"], ranks[1]["location"]) == ("startup", "late_init.py:12")
    assert processes_naming(str(script)) == []


def test_sigkill_of_ddplint_leaves_no_process(tmp_path):
    """SIGKILL cannot be handled: torchrun dies with ddplint and the ranks follow their parent."""
    script = copy_fixture(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddplint", "--runtime", "--timeout", "120", str(script)],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while len(processes_naming(str(script))) < 4 and time.monotonic() < deadline:  # ddplint, torchrun, 2 ranks
        time.sleep(0.2)
    assert len(processes_naming(str(script))) >= 4
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while processes_naming(str(script)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_naming(str(script)) == []


def test_a_stuck_dataloader_worker_is_named_with_its_line(tmp_path):
    """Rank 1's worker never returns from __getitem__: the report points at rank 1's loop and at
    the worker's line, says rank 0 finished (not a line of ddplint's own), and does not claim no
    DataLoader was iterated."""
    script = tmp_path / "stuck_worker.py"
    shutil.copy(FIXTURES / "stuck_worker.py", script)
    out = tmp_path / "report.json"
    proc = audit_until_timeout(script, out)
    assert proc.returncode == 1, proc.stderr
    assert processes_naming(str(script)) == []
    hang = next(c for c in json.loads(out.read_text())["checks"] if c["check"] == "run.hang")
    evidence = "\n".join(hang["evidence"])
    assert "rank 0: finished its script, waiting for the other ranks" in evidence
    assert "rank 1: first batch at stuck_worker.py:24: for x in loader:" in evidence
    assert "  rank 1's DataLoader worker is fetching, in __getitem__() at stuck_worker.py:15" in evidence
    assert "ddplint/runtime" not in evidence and "no DataLoader was iterated" not in evidence


def test_a_hang_inside_the_scripts_own_workers_is_named_at_their_lines(tmp_path):
    """One rank whose script spawns 2 workers (mp.spawn); worker 1 never reaches its loop and
    worker 0 waits for it in backward. Each worker's stack is in the report at the script's
    own line, rank 0's audited workers publish their phases, and the stack dump does not kill
    the workers (which once made the script's mp.spawn report them as failed)."""
    script = tmp_path / "spawned_worker_hangs.py"
    shutil.copy(FIXTURES / "spawned_worker_hangs.py", script)
    out = tmp_path / "report.json"
    proc = audit_until_timeout(script, out, "--nproc-per-node", "1")
    assert proc.returncode == 1, proc.stderr
    assert processes_naming(str(script)) == []
    checks = {c["check"]: c for c in json.loads(out.read_text())["checks"]}
    hang = checks["run.hang"]
    assert hang["status"] == "FAIL", hang
    evidence = hang["evidence"]
    assert evidence[0].startswith("rank 0: startup at spawned_worker_hangs.py:35: mp.spawn("), evidence
    waiting = "  rank 0's own worker (mp.spawn) is in wait_for_ever() at spawned_worker_hangs.py:17: time.sleep(0.5)"
    blocked = "  rank 0's own worker (mp.spawn) is in worker() at spawned_worker_hangs.py:27: F.cross_entropy"
    assert waiting in evidence and any(line.startswith(blocked) for line in evidence), evidence
    assert "rank 0's own workers, audited: worker 0 step 1 (epoch 0), worker 1 first batch" in evidence
    assert not any("ddplint/runtime" in line or "no DataLoader was iterated" in line for line in evidence)
    [rank] = hang["data"]["ranks"]
    assert sorted(w["location"] for w in rank["workers"]) == ["spawned_worker_hangs.py:17", "spawned_worker_hangs.py:27"]
    assert checks["run.failure"]["status"] == "SKIP", checks["run.failure"]


def test_a_busy_worker_in_a_recorded_dump_is_named():
    """The stacks rank 1 of stuck_worker.py dumped (its own, then its two DataLoader workers',
    recorded from a real run): the worker stuck in __getitem__ is named, the idle one is not."""
    import sysconfig

    import torch

    import ddplint
    from ddplint.runtime.checks.run import busy_workers, check_hang
    from ddplint.runtime.launcher import Hang, LaunchResult

    recorded = (Path(__file__).parent / "data" / "stuck_worker_stacks.txt").read_text()
    dump = recorded.format(
        DDPLINT=str(Path(ddplint.__file__).parent),
        TORCH=str(Path(torch.__file__).parent),
        STDLIB=sysconfig.get_paths()["stdlib"],
        SCRIPTS="/scripts",
    )
    [worker] = busy_workers(dump)
    assert (worker[0].func, worker[0].line) == ("__getitem__", 15) and worker[-1].func == "fetch"
    hang = Hang("timeout", 45.0, 45.0, {0: {"phase": "finished"}, 1: {"phase": "first batch"}}, {0: "", 1: dump})
    result = LaunchResult(returncode=None, records={}, phases=hang.phases, hang=hang, elapsed_s=45.0, log_tail="")
    evidence = check_hang(result, 2, "/scripts", 45.0).evidence
    assert evidence[0] == "rank 0: finished its script, waiting for the other ranks"
    assert evidence[1].startswith("rank 1: first batch at stuck_worker.py:24")
    assert evidence[2].startswith("  rank 1's DataLoader worker is fetching, in __getitem__() at stuck_worker.py:15")

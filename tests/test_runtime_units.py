"""The runtime audit's parts that need no torchrun: index audit, fingerprints, write redirection,
argument errors (exit 2 with one line, before anything is launched)."""

from __future__ import annotations

import os
import socket
import sys
import warnings
from pathlib import Path

import pytest
from conftest import rank_records

np = pytest.importorskip("numpy")  # the runtime extra; without it these tests skip
torch = pytest.importorskip("torch")

from ddplint.runtime.audit import run_audit  # noqa: E402
from ddplint.runtime.checks.data import audit_indices  # noqa: E402
from ddplint.runtime.options import RuntimeOptions  # noqa: E402


def distributed_lists(n: int, world: int, **kw) -> dict[int, np.ndarray]:
    from torch.utils.data.distributed import DistributedSampler

    return {r: np.array(list(DistributedSampler(range(n), num_replicas=world, rank=r, **kw))) for r in range(world)}


def test_index_audit_counts_padding_and_drops_of_a_real_distributed_sampler():
    padded = audit_indices(distributed_lists(10, 4), 10)
    assert (padded.duplicates, padded.covered, padded.missing) == (2, 10, 0)
    dropped = audit_indices(distributed_lists(10, 4, drop_last=True), 10)
    assert (dropped.duplicates, dropped.covered, dropped.missing) == (0, 8, 2)


def test_index_audit_reports_the_overlapping_pair():
    lists = {0: np.arange(0, 50), 1: np.arange(25, 75), 2: np.arange(75, 100)}
    audit = audit_indices(lists, 100)
    assert audit.duplicates == 25
    assert audit.pairs == [(0, 1, 25, 0.5)] or audit.pairs == [(1, 0, 25, 0.5)]


def test_fingerprints_are_per_sample_whatever_the_batch_shape():
    from ddplint.runtime.fingerprint import batch_fingerprints

    x, y = torch.arange(24.0).reshape(6, 4), torch.arange(6)
    whole = batch_fingerprints((x, y), batched=True)
    assert len(set(whole)) == 6
    assert batch_fingerprints((x[2:4], y[2:4]), batched=True) == whole[2:4]
    assert batch_fingerprints({"x": x.bfloat16(), "name": list("abcdef")}, batched=True) != whole
    assert len(batch_fingerprints(["a", "b", "a"], batched=True)) == 3
    assert len(set(batch_fingerprints(["a", "b", "a"], batched=True))) == 2


def test_write_redirection_leaves_the_user_tree_untouched(tmp_path):
    from ddplint.runtime.writeprobe import WriteRedirector

    user = tmp_path / "project"
    user.mkdir()
    (user / "log.txt").write_text("old\n")
    scratch = tmp_path / "run" / "scratch" / "rank-0"
    w = WriteRedirector(scratch)
    w.install()
    try:
        os.makedirs(user / "ckpt", exist_ok=True)
        torch.save({"a": 1}, user / "ckpt" / "model.pt")
        assert torch.load(user / "ckpt" / "model.pt") == {"a": 1}  # reads find the redirected copy
        with open(user / "log.txt", "a") as f:
            f.write("new\n")
        with open(user / "log.txt") as f:
            assert f.read() == "old\nnew\n"
        os.replace(user / "ckpt" / "model.pt", user / "final.pt")
        os.remove(user / "log.txt")
    finally:
        w.uninstall()
    assert sorted(p.name for p in user.iterdir()) == ["log.txt"]
    assert (user / "log.txt").read_text() == "old\n"
    ops = [(Path(x["path"]).name, x["op"]) for x in w.writes]
    assert ops == [
        ("ckpt", "makedirs"),
        ("model.pt", "torch.save"),
        ("log.txt", "open:a"),
        ("final.pt", "os.replace"),
        ("log.txt", "remove"),
    ]
    assert all(x["site"] == f"{__file__}:{x['site'].rsplit(':', 1)[1]}" for x in w.writes)


def test_a_module_imported_after_the_probe_is_handed_over_once_executed(tmp_path, monkeypatch):
    from ddplint.runtime.writeprobe import _AfterImport

    (tmp_path / "late_saver.py").write_text("def save(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hook = _AfterImport("late_saver", lambda module: seen.append(module.save(1)))
    sys.meta_path.insert(0, hook)
    try:
        import late_saver  # noqa: F401  # the import the hook waits for
    finally:
        sys.meta_path.remove(hook)
        sys.modules.pop("late_saver", None)
    assert seen == [1]  # called with the executed module: its functions are there to wrap


def test_distributed_checkpoint_saves_are_wrapped_and_given_back(tmp_path):
    import torch.distributed.checkpoint as dcp

    from ddplint.runtime.writeprobe import WriteRedirector

    before = dcp.save
    w = WriteRedirector(tmp_path / "run" / "scratch" / "rank-0", redirect=False)
    w.install()  # imported already: wrapped at once
    try:
        assert dcp.save is not before and dcp.save.__wrapped__ is before
        with warnings.catch_warnings():  # one process without a group: torch says so
            warnings.simplefilter("ignore")
            dcp.save({"w": torch.ones(2)}, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    finally:
        w.uninstall()
    assert dcp.save is before
    [save] = [x for x in w.writes if x["op"] == "dcp.save"]
    assert save["path"] == str(tmp_path / "ckpt") and save["collective"] and save["site"].startswith(__file__)


def options(tmp_path, **kw) -> RuntimeOptions:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    return RuntimeOptions(script=kw.pop("script", script), **kw)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"script": Path("/nonexistent/train.py")}, "script not found: /nonexistent/train.py"),
        ({"steps": 0}, "--steps must be at least 1"),
        ({"backend": "mpi"}, "unknown backend 'mpi'"),
        ({"backend": "nccl"}, "--backend nccl needs GPUs and none is visible"),
        ({"device": "cuda", "mapped_gpus": 2}, "--mapped-gpus needs CUDA mapped to the CPU"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, kw, message):
    assert run_audit(options(tmp_path, **kw)) == 2
    err = capsys.readouterr().err
    assert err.startswith("ddplint: error: ") and message in err and err.count("\n") == 1


def test_torch_missing_names_the_runtime_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # what find_spec sees when torch is absent
    assert run_audit(options(tmp_path)) == 2
    assert "pip install 'ddplint[runtime]'" in capsys.readouterr().err


def test_busy_master_port_is_refused_before_launch(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        assert run_audit(options(tmp_path, master_port=port)) == 2
    err = capsys.readouterr().err
    assert f"--master-port {port} is in use: port {port} (the rendezvous store) is already taken by pid {os.getpid()}" in err
    assert "or use --master-port " in err and err.count("\n") == 1


def test_single_writer_names_log_races_ddp302_and_checkpoint_races_ddp301():
    from ddplint.runtime.checks.writers import check_single_writer

    def records(*writes):
        return rank_records(
            {r: {"writes": [{"path": p, "op": op, "site": "/job/train.py:7"} for p, op in writes]} for r in (0, 1)}
        )

    log = check_single_writer(records(("/job/train.log", "open:a")), "/job")
    assert (log.status.value, log.rule) == ("FAIL", "DDP302")
    assert log.evidence == ["train.log: ranks 0, 1 (open at train.py:7)"]
    ckpt = check_single_writer(records(("/job/model.pt", "open:wb")), "/job")
    assert (ckpt.status.value, ckpt.rule) == ("FAIL", "DDP301")
    dirs = rank_records(
        {
            0: {"writes": [{"path": "/job/out", "op": "makedirs", "site": None, "dir": True}]},
            1: {"writes": [{"path": "/job/out", "op": "makedirs", "site": None, "dir": True}]},
        }
    )
    assert check_single_writer(dirs, "/job").status.value == "PASS"  # makedirs(exist_ok) everywhere is fine
    one = {0: records(("/job/out.txt", "open:w"))[0]}
    alone = check_single_writer(one, "/job", sandboxed=True)
    assert (alone.status.value, alone.summary) == ("PASS", "1 path(s) opened for writing, each by one rank (inside the sandbox)")


def test_single_writer_skips_the_workers_a_script_spawned_and_says_where_their_writes_went():
    from ddplint.runtime.checks.writers import check_single_writer

    spawned = rank_records({0: {"own_workers": 2}, 1: {"own_workers": 2}})
    inside = check_single_writer(spawned, "/job", sandboxed=True)
    assert inside.status.value == "SKIP" and "4 worker process(es)" in inside.summary
    assert inside.summary.endswith("(io.sandbox lists what the job created)")
    outside = check_single_writer(spawned, "/job", sandboxed=False)
    assert outside.status.value == "SKIP" and outside.summary.endswith("went to the disk unseen")


def _error(kind: str, message: str, t: float, line: int) -> dict:
    site = {"file": "/job/spawned_worker_raises.py", "line": line, "function": "worker", "code": None}
    return {"type": kind, "message": message, "text": "", "t": t, "site": site}


def test_the_first_failure_is_the_root_cause_whether_a_rank_or_one_of_rank_0s_workers():
    """Rank 1's own (unaudited) worker raised first; rank 0's audited worker was then stopped by
    the teardown (KeyboardInterrupt): rank 1 is the root cause. In the other order the worker is."""
    from ddplint.runtime.checks.run import check_failure
    from ddplint.runtime.launcher import LaunchResult

    bad = "ValueError: worker 1 cannot read its batch (in its worker 1, mp.spawn)"
    ranks = rank_records(
        {
            0: {"status": "terminated"},
            1: {"status": "raised", "error": _error("ProcessRaisedException", bad, 10.0, 16)},
        }
    )
    stopped = rank_records({1: {"status": "raised", "error": _error("KeyboardInterrupt", "KeyboardInterrupt: ", 12.0, 12)}})
    result = LaunchResult(returncode=1, records=ranks, workers=stopped, phases={}, hang=None, elapsed_s=12.0, log_tail="")
    failure = check_failure(result, 2, "/job")
    assert failure.summary == f"rank 1 raised {bad} at spawned_worker_raises.py:16 in worker", failure.summary
    assert "worker 1 then failed: KeyboardInterrupt:" in failure.evidence
    first = rank_records({1: {"status": "raised", "error": _error("ValueError", "ValueError: no batch", 8.0, 16)}})
    result = LaunchResult(returncode=1, records=ranks, workers=first, phases={}, hang=None, elapsed_s=12.0, log_tail="")
    failure = check_failure(result, 2, "/job")
    assert failure.summary.startswith("worker 1 of rank 0's script (mp.spawn) raised ValueError: no batch"), failure.summary
    assert f"rank 1 then failed: {bad}" in failure.evidence


def test_workers_spawned_by_every_rank_point_to_one_process_per_node():
    """The tutorial's mp.spawn script under torchrun with two processes: each rank starts a job of
    its own on the script's fixed port, and the second cannot listen. The fix says to launch it
    once per node; a failure with one spawning rank gets no such advice."""
    from ddplint.runtime.checks.run import SPAWNED_BY_EVERY_RANK_FIX, check_failure
    from ddplint.runtime.launcher import LaunchResult

    in_use = _error("DistNetworkError", "DistNetworkError: port: 12355, EADDRINUSE, address already in use", 5.0, 22)
    raised = {"own_workers": 2, "status": "raised", "error": in_use}
    both = rank_records({0: {"own_workers": 2, "status": "terminated"}, 1: raised})
    failure = check_failure(LaunchResult(1, both, {}, None, 6.0, ""), 2, "/job")
    assert failure.status.value == "FAIL" and failure.fix == SPAWNED_BY_EVERY_RANK_FIX, failure
    assert "ranks 0, 1 each started workers of their own (mp.spawn)" in failure.evidence
    one = rank_records({0: {"status": "terminated"}, 1: raised})
    alone = check_failure(LaunchResult(1, one, {}, None, 6.0, ""), 2, "/job")
    assert alone.status.value == "FAIL" and alone.fix is None and not any("each started" in e for e in alone.evidence)


def test_a_stall_in_the_first_collective_is_told_apart_and_points_to_nccl_debug():
    from ddplint.runtime.checks.run import check_hang
    from ddplint.runtime.launcher import Hang, LaunchResult

    def hang_in(phase):
        phases = {0: {"phase": phase}, 1: {"phase": phase}}
        return LaunchResult(None, {}, phases, Hang("timeout", 30.0, 30.0, phases, {}), 30.0, "")

    stalled = check_hang(hang_in("first collective"), 2, "/job", 30.0)
    assert stalled.status.value == "FAIL"
    assert stalled.evidence[0].startswith("rank 0: first collective")
    assert "NCCL_DEBUG=INFO" in stalled.fix
    assert check_hang(hang_in("first batch"), 2, "/job", 30.0).fix is None


def _spawned_worker_waiting_at(line: int) -> str:
    """A faulthandler dump of a spawned worker blocked in all_reduce at train.py:`line`."""
    import torch

    import ddplint

    c10d = Path(torch.__file__).parent / "distributed" / "distributed_c10d.py"
    wrapper = Path(ddplint.__file__).parent / "runtime" / "ownworkers.py"
    return (
        "Current thread 0x01 (most recent call first):\n"
        f'  File "{c10d}", line 2500 in all_reduce\n'
        f'  File "/job/train.py", line {line} in worker\n'
        f'  File "{wrapper}", line 90 in _worker\n'
    )


def test_workers_of_different_ranks_blocked_at_different_lines_are_no_ddp401():
    """Each rank's own workers (mp.spawn) form a job of their own: rank 0's blocked at one line
    and rank 1's at another are two hangs, not ranks in different collectives; two workers of
    one rank blocked at two lines are."""
    from ddplint.runtime.checks.run import check_hang
    from ddplint.runtime.launcher import Hang, LaunchResult

    def hang_of(stacks):
        phases = {0: {"phase": "startup"}, 1: {"phase": "startup"}}
        return LaunchResult(None, {}, phases, Hang("timeout", 30.0, 30.0, phases, stacks), 30.0, "")

    apart = check_hang(hang_of({0: _spawned_worker_waiting_at(20), 1: _spawned_worker_waiting_at(30)}), 2, "/job", 30.0)
    assert apart.rule is None and "different collective calls" not in apart.summary, apart.summary
    assert "  rank 1's own worker (mp.spawn) waits in all_reduce() at train.py:30" in apart.evidence
    split = _spawned_worker_waiting_at(20) + _spawned_worker_waiting_at(30)
    within = check_hang(hang_of({0: split, 1: ""}), 2, "/job", 30.0)
    assert within.rule == "DDP401" and within.summary.endswith("ranks are blocked in different collective calls")


def test_packages_inside_the_stdlib_directory_are_not_the_stdlib(tmp_path):
    """Outside a virtualenv (pyenv, conda, a system Python) site-packages sits inside the
    stdlib's directory: torch's frames there are a library's, not the standard library's that
    acts for its caller (torch creating its compile cache was reported as the script's write)."""
    from ddplint.runtime.sites import stdlib_prefixes

    home = tmp_path / "lib" / "python3.11"
    (home / "json").mkdir(parents=True)
    (home / "site-packages" / "torch").mkdir(parents=True)
    (home / "runpy.py").write_text("")
    prefixes = stdlib_prefixes(str(home), [str(home / "site-packages")])
    assert str(home / "runpy.py").startswith(prefixes)
    assert str(home / "json" / "decoder.py").startswith(prefixes)
    assert not str(home / "site-packages" / "torch" / "_dynamo" / "package.py").startswith(prefixes)
    assert not str(home / "runpy_helper.py").startswith(prefixes)

"""Run directories of audits that died (ddplint SIGKILLed) are found by their free lock and removed
at the next start; a live audit's is never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddplint.runtime.rundir import (
    LOCK,
    PREFIX,
    UNLOCKED_STALE_S,
    RunDir,
    stale_run_dirs,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def tmpdir_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    return tmp_path


def test_a_live_run_directory_is_not_stale_and_a_released_one_is(tmpdir_env):
    live = RunDir.create()
    assert live.path.parent == tmpdir_env and (live.path / LOCK).exists()
    assert stale_run_dirs(str(tmpdir_env)) == []
    live.unlock()  # what the kernel does when the owner dies
    assert stale_run_dirs(str(tmpdir_env)) == [live.path]


def test_only_this_tools_directories_and_old_unlocked_ones(tmpdir_env):
    other = tmpdir_env / "pytest-of-someone"
    other.mkdir()
    young = tmpdir_env / (PREFIX + "young")
    young.mkdir()  # no lock yet: the moment between mkdtemp and the lock
    old = tmpdir_env / (PREFIX + "old")
    old.mkdir()
    then = time.time() - UNLOCKED_STALE_S - 60
    os.utime(old, (then, then))
    (tmpdir_env / (PREFIX + "file")).write_text("")  # not a directory
    assert stale_run_dirs(str(tmpdir_env)) == [old]


def test_a_missing_temp_directory_has_nothing_stale(tmp_path):
    assert stale_run_dirs(str(tmp_path / "absent")) == []


SLEEPER = """\
import time
import torch.distributed as dist
dist.init_process_group("gloo")
time.sleep(600)
"""


def test_the_run_directory_of_a_killed_audit_is_removed_by_the_next(tmp_path):
    pytest.importorskip("torch")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "ddplint", "--runtime", "--allow-no-data", "--timeout", "300", str(script)]
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert first.stderr is not None
    try:
        for line in first.stderr:  # wait on the event, not on a clock: both ranks are past init
            if "2/2 ranks reporting" in line and "startup" not in line:
                break
        left = [p for p in tmp.iterdir() if p.name.startswith(PREFIX)]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert len(left) == 1
    assert left[0].exists()  # nobody cleaned up
    # the next audit, with the same temp directory, removes it before it starts
    (tmp_path / "ok.py").write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    second = subprocess.run(
        cmd[:-1] + [str(tmp_path / "ok.py")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stderr
    assert not left[0].exists()
    assert [p for p in tmp.iterdir() if p.name.startswith(PREFIX)] == []

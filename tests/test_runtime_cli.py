"""The runtime audit's command line, as a user runs it: torchrun's convention (ddplint's options
before the script, the script's after it), the ranks' own output (-v, the failing rank's last
lines, the JSON report), -q, and the machine preflight with no script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import jsonschema
import pytest
from test_runtime_audit import FIXTURES, env, mapped, report_schema

from ddplint.cli import runtime_argv

WAIT_S = 300


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--runtime", "--nproc-per-node", "4", "train.py", "--epochs", "3"],
            ["--runtime", "--nproc-per-node", "4", "--", "train.py", "--epochs", "3"],
        ),
        (["--runtime", "train.py", "--", "--epochs", "3"], ["--runtime", "--", "train.py", "--epochs", "3"]),
        (
            ["--runtime", "-o", "r.json", "--format=json", "-q", "train.py", "-q"],
            ["--runtime", "-o", "r.json", "--format=json", "-q", "--", "train.py", "-q"],
        ),
        (["--runtime", "--", "train.py", "--x"], ["--runtime", "--", "train.py", "--x"]),
        (["src/", "--select", "DDP1"], ["src/", "--select", "DDP1"]),  # lint: unchanged
        (["--runtime"], ["--runtime"]),
    ],
)
def test_options_before_the_script_are_ddplints_and_the_rest_the_scripts(argv, expected):
    assert runtime_argv(argv) == expected


def run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddplint", "--runtime", *args],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def test_verbose_quiet_text_report_of_a_failing_rank(tmp_path):
    shutil.copy(FIXTURES / "prints_then_fails.py", tmp_path)
    proc = run(tmp_path, "-v", "-q", "prints_then_fails.py", "--epochs", "7")
    assert proc.returncode == 1, proc.stderr
    assert "[rank 0] hello from rank 0, args ['--epochs', '7']" in proc.stderr  # streamed, the script's args
    assert "[rank 1] a warning on rank 1" in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"ddplint runtime audit: prints_then_fails.py  (2 ranks, gloo{mapped()}, 2 epochs x 8 steps")
    assert lines[2].startswith("FAIL  run.failure") and "rank 1 raised RuntimeError: rank 1 gives up" in lines[2]
    assert not any(line.startswith("PASS ") for line in lines)  # -q
    assert "rank 1's last output:" in proc.stdout
    assert any(line.strip() == "| RuntimeError: rank 1 gives up" for line in lines)


def test_json_report_keeps_every_ranks_output(tmp_path):
    shutil.copy(FIXTURES / "prints_then_fails.py", tmp_path)
    out = tmp_path / "report.json"
    proc = run(tmp_path, "--format", "json", "--output", str(out), "prints_then_fails.py", "--flag", "x")
    assert proc.returncode == 1, proc.stderr
    assert "[rank 0]" not in proc.stderr  # not streamed without -v
    report = json.loads(out.read_text())
    jsonschema.validate(report, report_schema())
    assert report["script_args"] == ["--flag", "x"]
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert "hello from rank 0, args ['--flag', 'x']\n" == ranks[0]["stdout"]
    assert "a warning on rank 1" in ranks[1]["stderr"] and "RuntimeError: rank 1 gives up" in ranks[1]["stderr"]
    assert not ranks[0]["output_truncated"]


def test_machine_preflight_without_a_script(tmp_path):
    out = tmp_path / "report.json"
    proc = run(tmp_path, "--format", "json", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    jsonschema.validate(report, report_schema())
    assert report["script"] is None and report["writes"] == [] and report["loaders"] == []
    checks = {c["check"]: c["status"] for c in report["checks"]}
    assert checks["comm.allreduce"] == "PASS" and checks["comm.bandwidth"] == "PASS"
    assert checks["run.failure"] == "PASS" and checks["run.hang"] == "PASS"
    assert not [c for c in checks if c.startswith(("data.", "io."))]
    text = run(tmp_path, "-q")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("ddplint machine preflight  (2 ranks, gloo,")

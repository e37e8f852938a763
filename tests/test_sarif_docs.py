"""docs/code-scanning.md: its workflow and snippets parse, and its ddplint commands do what it says."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import yaml
from conftest import ROOT

DOC = ROOT / "docs" / "code-scanning.md"
BAD = 'import torch\nimport torch.distributed as dist\n\ndist.init_process_group("nccl")\nx = torch.ones(1).to("cuda:0")\n'


def yaml_blocks() -> list:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)]


def run_step(command: str, cwd) -> subprocess.CompletedProcess:
    program, *args = shlex.split(command)
    assert program == "ddplint"
    return subprocess.run([sys.executable, "-m", "ddplint", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_workflow_lints_then_uploads_the_file_it_wrote(tmp_path):
    workflow, annotate, _ = yaml_blocks()
    assert workflow["permissions"]["security-events"] == "write"
    steps = workflow["jobs"]["ddplint"]["steps"]
    assert [s.get("uses", s.get("run")).split("@")[0] for s in steps] == [
        "actions/checkout", "actions/setup-python", "pip install ddplint",
        "ddplint --format sarif --output ddplint.sarif --exit-zero .", "github/codeql-action/upload-sarif",
    ]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "main.py").write_text(BAD, encoding="utf-8")
    lint = run_step(steps[3]["run"], tmp_path)
    assert lint.returncode == 0, lint.stderr  # findings do not stop the job before the upload
    log = json.loads((tmp_path / steps[4]["with"]["sarif_file"]).read_text(encoding="utf-8"))
    results = log["runs"][0]["results"]
    assert {"DDP101", "DDP103"} <= {r["ruleId"] for r in results}
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {"train/main.py"}

    annotations = run_step(annotate[0]["run"], tmp_path)
    assert annotations.returncode == 1
    assert [line.split(" ", 1)[0] for line in annotations.stdout.splitlines()] == [f"::{r['level']}" for r in results]


def test_the_pre_commit_snippet_names_the_shipped_hook():
    _, _, precommit = yaml_blocks()
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (repo,) = precommit["repos"]
    assert [h["id"] for h in repo["hooks"]] == ["ddplint"]
    assert "ddplint" in {h["id"] for h in hooks}

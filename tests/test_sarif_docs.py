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
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)]


def run_step(command: str, cwd) -> subprocess.CompletedProcess:
    program, *args = shlex.split(command)
    assert program == "ddplint"
    return subprocess.run(
        [sys.executable, "-m", "ddplint", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_workflow_checks_out_ddplint_and_runs_its_action():
    workflow, _, _, _ = yaml_blocks()
    assert workflow["permissions"]["security-events"] == "write"
    steps = workflow["jobs"]["ddplint"]["steps"]
    assert [s["uses"].split("@")[0] for s in steps] == [
        "actions/checkout",
        "actions/setup-python",
        "actions/checkout",
        "./.ddplint",
    ]
    assert steps[2]["with"]["path"] == ".ddplint" and steps[2]["with"]["repository"] == "ddplint/ddplint"
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert set(steps[3]["with"]) <= set(action["inputs"])


def test_the_steps_without_the_action_lint_then_upload_the_file_they_wrote(tmp_path):
    _, steps, annotate, _ = yaml_blocks()
    assert [s.get("uses", s.get("run")).split("@")[0] for s in steps] == [
        'pip install "ddplint ',
        "ddplint --output-format sarif --output ddplint.sarif --exit-zero .",
        "github/codeql-action/upload-sarif",
    ]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "main.py").write_text(BAD, encoding="utf-8")
    lint = run_step(steps[1]["run"], tmp_path)
    assert lint.returncode == 0, lint.stderr  # findings do not stop the job before the upload
    log = json.loads((tmp_path / steps[2]["with"]["sarif_file"]).read_text(encoding="utf-8"))
    results = log["runs"][0]["results"]
    assert "DDP101" in {r["ruleId"] for r in results}
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {"train/main.py"}

    annotations = run_step(annotate[0]["run"], tmp_path)
    assert annotations.returncode == 1
    assert [line.split(" ", 1)[0] for line in annotations.stdout.splitlines()] == [f"::{r['level']}" for r in results]


def test_the_pre_commit_snippet_is_a_local_hook_like_the_shipped_one():
    _, _, _, precommit = yaml_blocks()
    (shipped,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (repo,) = precommit["repos"]
    (hook,) = repo["hooks"]
    assert repo["repo"] == "local"
    assert {k: hook[k] for k in ("id", "entry", "language", "types_or")} == {
        k: shipped[k] for k in ("id", "entry", "language", "types_or")
    }
    assert hook["additional_dependencies"][0].startswith("ddplint @ git+https://")


def test_the_readme_snippets_are_the_tested_ones():
    """README.md repeats the pre-commit hook and the workflow; they must say what the doc's tested copies say."""
    readme = [
        yaml.safe_load(block)
        for block in re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    ]
    workflow, _, _, precommit = yaml_blocks()
    readme_precommit = next(block for block in readme if "repos" in block)
    readme_workflow = next(block for block in readme if "jobs" in block)
    assert readme_precommit == precommit
    steps = readme_workflow["jobs"]["ddplint"]["steps"]
    assert [s["uses"] for s in steps] == [s["uses"] for s in workflow["jobs"]["ddplint"]["steps"]]
    assert readme_workflow["permissions"] == workflow["permissions"]

"""action.yml, run as the Actions runner would: its shell steps in order, in a fresh virtualenv,
with the action's inputs at their defaults; the upload step must read the file the lint wrote."""

from __future__ import annotations

import json
import os
import re
import subprocess
import venv

import jsonschema
import yaml
from conftest import ROOT, SARIF_SCHEMA

BAD = 'import torch\nimport torch.distributed as dist\n\ndist.init_process_group("nccl")\nx = torch.ones(1).to("cuda:0")\n'


def expand(text: str, inputs: dict[str, str]) -> str:
    """The runner's `${{ inputs.NAME }}` substitution (the only expression the run steps use)."""
    return re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: inputs[m.group(1)], text)


def test_the_composite_action_installs_lints_and_hands_the_sarif_to_the_upload(tmp_path):
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    inputs = {name: spec["default"] for name, spec in action["inputs"].items()}
    *shell_steps, upload = action["runs"]["steps"]
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")

    workspace = tmp_path / "workspace"
    (workspace / "train").mkdir(parents=True)
    (workspace / "train" / "main.py").write_text(BAD, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    env = {
        **os.environ,
        "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_ACTION_PATH": str(ROOT),
        "VIRTUAL_ENV": str(env_dir),
    }
    env.pop("PYTHONPATH", None)  # only what the action installed may run
    for step in shell_steps:
        assert step["shell"] == "bash"
        step_env = {**env, **{k: expand(str(v), inputs) for k, v in step.get("env", {}).items()}}
        proc = subprocess.run(
            ["bash", "-e", "-c", expand(step["run"], inputs)],
            cwd=workspace,
            env=step_env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert proc.returncode == 0, f"{step['name']}: {proc.stdout}{proc.stderr}"

    where = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import ddplint; print(ddplint.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tmp_path,
    ).stdout
    assert where.startswith(str(env_dir))  # installed into the fresh environment, not borrowed
    sarif = workspace / expand(upload["with"]["sarif_file"], inputs)
    log = json.loads(sarif.read_text(encoding="utf-8"))
    jsonschema.validate(log, json.loads(SARIF_SCHEMA.read_text(encoding="utf-8")))
    results = log["runs"][0]["results"]
    assert "DDP101" in {r["ruleId"] for r in results}
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {"train/main.py"}
    assert "inputs.upload == 'true'" in upload["if"] and upload["with"]["category"] == "ddplint"

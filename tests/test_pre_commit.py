"""The hook as users install it: the real `pre-commit try-repo` against this checkout."""

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import FIXTURES, ROOT

PRE_COMMIT = shutil.which("pre-commit") or str(Path(sys.executable).parent / "pre-commit")


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def try_repo(project: Path):
    """try-repo installs the hook from this checkout (uncommitted changes included)."""
    git(project, "add", "-A")
    return subprocess.run(
        [PRE_COMMIT, "try-repo", str(ROOT), "ddplint", "--all-files"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
    )


def new_project(tmp_path: Path, source: Path, extra: str = "") -> Path:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    git(project, "config", "user.email", "dev@example.com")
    git(project, "config", "user.name", "dev")
    shutil.copy(source, project / "train.py")
    if extra:
        (project / "pyproject.toml").write_text(extra)
    return project


def test_hook_fails_on_a_bad_script(tmp_path):
    project = new_project(tmp_path, FIXTURES / "lint" / "device" / "hardcoded_to_cuda0.py")
    proc = try_repo(project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "train.py:13:39: DDP101" in proc.stdout


def test_hook_passes_on_a_good_script(tmp_path):
    project = new_project(tmp_path, FIXTURES / "lint" / "device" / "nanogpt_style.py")
    proc = try_repo(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Passed" in proc.stdout


def test_hook_applies_config_exclude_to_named_files(tmp_path):
    project = new_project(
        tmp_path,
        FIXTURES / "lint" / "device" / "hardcoded_to_cuda0.py",
        extra='[tool.ddplint]\nextend-exclude = ["train.py"]\n',
    )
    proc = try_repo(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def snapshot(tmp_path: Path) -> str:
    """This checkout (uncommitted changes included) as a one-commit repository, the way
    try-repo builds one, so that a config can pass the hook its own `args`."""
    repo = tmp_path / "hook-repo"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=dev@example.com", "-c", "user.name=dev", "commit", "-qm", "snapshot")
    return str(repo)


def test_hook_with_fix_rewrites_the_staged_file(tmp_path):
    project = new_project(tmp_path, FIXTURES / "lint" / "side_effects" / "makedirs_race.py")
    repo = snapshot(tmp_path)
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {repo}\n    rev: {rev}\n    hooks:\n      - id: ddplint\n        args: [--fix]\n"
    )
    git(project, "add", "-A")
    before = (project / "train.py").read_text()
    proc = subprocess.run([PRE_COMMIT, "run", "--all-files"], cwd=project, capture_output=True, text=True, timeout=600)
    after = (project / "train.py").read_text()
    assert proc.returncode == 1 and "files were modified by this hook" in proc.stdout, proc.stdout + proc.stderr
    assert "exist_ok=True" in after and after != before
    again = subprocess.run([PRE_COMMIT, "run", "--all-files"], cwd=project, capture_output=True, text=True, timeout=600)
    assert "files were modified" not in again.stdout and (project / "train.py").read_text() == after


def test_the_documented_local_hook_installs_from_a_clone_and_runs(tmp_path):
    """docs/code-scanning.md's `repo: local` hook, with its dependency pointed at this checkout."""
    import re

    import yaml

    doc = (ROOT / "docs" / "code-scanning.md").read_text(encoding="utf-8")
    config = next(
        yaml.safe_load(block)
        for block in re.findall(r"```yaml\n(.*?)```", doc, re.DOTALL)
        if "repos" in (yaml.safe_load(block) or {})
    )
    (hook,) = config["repos"][0]["hooks"]
    hook["additional_dependencies"] = [f"ddplint @ {ROOT.as_uri()}"]
    project = new_project(tmp_path, FIXTURES / "lint" / "device" / "hardcoded_to_cuda0.py")
    (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git(project, "add", "-A")
    proc = subprocess.run(
        [PRE_COMMIT, "run", "--all-files"], cwd=project, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "train.py:" in proc.stdout and "DDP101" in proc.stdout

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
        cwd=project, capture_output=True, text=True, timeout=600,
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
        tmp_path, FIXTURES / "lint" / "device" / "hardcoded_to_cuda0.py",
        extra='[tool.ddplint]\nextend-exclude = ["train.py"]\n',
    )
    proc = try_repo(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr

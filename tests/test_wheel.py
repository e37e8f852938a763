"""The rule docs travel in the wheel: `--explain`, `--list-rules` and SARIF help work from an install.

Builds the wheel with pip (isolated build, as users' installs do), installs it without
dependencies into a fresh venv, and borrows the dependencies from this interpreter's
site-packages through a .pth file placed after the venv's own: the installed ddplint wins
the import, and no network is needed beyond the build backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

from ddplint.lint.rules import CATALOG

DOCS = sorted((ROOT / "rules").glob("DDP*.md"))


def run(*args: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, venv bin dir, a working directory outside the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    build = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", base / "dist", ROOT, cwd=base)
    if build.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{build.stdout}{build.stderr}")
    (wheel,) = (base / "dist").glob("ddplint-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel, cwd=base)
    assert install.returncode == 0, install.stderr
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=base).stdout.strip()
    Path(site, "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    outside = base / "elsewhere"
    outside.mkdir()
    return wheel, venv / "bin", outside


def test_the_wheel_carries_every_rule_doc(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"ddplint/_rules/{doc.name}" for doc in DOCS} <= names
    assert {f"ddplint/_rules/{rule.code}-{rule.name}.md" for rule in CATALOG} <= names


def test_explain_reads_the_installed_docs(installed):
    _, bin_dir, outside = installed
    where = run(bin_dir / "python", "-c", "import ddplint.catalog as c; print(c.docs_dir())", cwd=outside)
    assert Path(where.stdout.strip()).is_relative_to(bin_dir.parent), where.stderr
    proc = run(bin_dir / "ddplint", "--explain", "DDP101", cwd=outside)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (ROOT / "rules" / "DDP101-hard-coded-cuda-index.md").read_text(encoding="utf-8").rstrip() + "\n"
    listed = run(bin_dir / "ddplint", "--list-rules", cwd=outside)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [rule.code for rule in CATALOG]


def test_sarif_help_from_the_installed_docs(installed):
    _, bin_dir, outside = installed
    (outside / "train.py").write_text('import torch\ntorch.distributed.init_process_group("nccl")\n', encoding="utf-8")
    proc = run(bin_dir / "ddplint", "--format", "sarif", "train.py", cwd=outside)
    assert proc.returncode == 1, proc.stderr
    rules = json.loads(proc.stdout)["runs"][0]["tool"]["driver"]["rules"]
    by_id = {rule["id"]: rule["help"]["markdown"] for rule in rules}
    assert by_id["DDP103"] == (ROOT / "rules" / "DDP103-missing-set-device.md").read_text(encoding="utf-8")

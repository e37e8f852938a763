"""Every module imports under the oldest Python that pyproject.toml declares (3.10).

ddplint is installed from this checkout, with its declared dependencies, into a fresh venv of
that interpreter (without the runtime extra: torch and numpy are imported only inside the
ranks) and imported module by module by .ci/import_check.py, the script CI runs; a machine
without that Python says so and skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

OLDEST = "3.10"
IMPORT_CHECK = ROOT / ".ci" / "import_check.py"


def _oldest_python() -> str | None:
    """An interpreter of the oldest version that really runs (a pyenv shim may not)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob(f"{OLDEST}.*/bin/python{OLDEST}")) if pyenv.is_dir() else []
    for python in [*map(str, candidates), shutil.which(f"python{OLDEST}")]:
        if python and subprocess.run([python, "-c", ""], capture_output=True, timeout=60, check=False).returncode == 0:
            return python
    return None


def test_every_module_imports_under_the_oldest_declared_python(tmp_path):
    python = _oldest_python()
    if python is None:
        pytest.skip(f"no Python {OLDEST} on this machine: the oldest declared version is not checked")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    install = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    imported = subprocess.run(
        [venv / "bin" / "python", str(IMPORT_CHECK)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert f"under Python {OLDEST}." in imported.stdout, imported.stdout
    lint = subprocess.run(
        [venv / "bin" / "ddplint", str(ROOT / "fixtures/lint/device/hardcoded_to_cuda0.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert lint.returncode == 1 and "DDP101" in lint.stdout, lint.stdout + lint.stderr

"""The result cache: reused only while the file, its helpers, the configuration and ddplint are unchanged."""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_cli

from ddplint import config as config_mod
from ddplint.lint import cache as cache_mod
from ddplint.lint.engine import lint_paths
from ddplint.lint.rules import KNOWN_RULES

SCRIPT = (
    "import torch\n"
    "import torch.distributed as dist\n"
    "from helpers import is_main_process\n"
    "dist.init_process_group('nccl')\n"
    "a = torch.zeros(1).to('cuda:0')\n"
    "if is_main_process():\n"
    "    torch.save({}, 'ckpt.pt')\n"
    "dist.destroy_process_group()\n"
)
GUARD = "import torch.distributed as dist\n\ndef is_main_process():\n    return dist.get_rank() == 0\n"
NOT_A_GUARD = "def is_main_process():\n    return True\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ddplint]\n")
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "helpers.py").write_text(GUARD)
    return tmp_path


class Counting:
    """Counts the files the engine really lints (not served from the cache)."""

    def __init__(self, monkeypatch):
        from ddplint.lint import engine

        self.linted: list[str] = []
        real = engine.lint_file

        def counting(path, *args):
            self.linted.append(path.name)
            return real(path, *args)

        monkeypatch.setattr(engine, "lint_file", counting)


def run(project, **changes):
    config = config_mod.load(project, KNOWN_RULES)
    from dataclasses import replace

    config = replace(config, **changes)
    result = lint_paths([project / "train.py"], config, jobs=1, cache=cache_mod.ResultCache(config))
    return sorted((d.code, d.line) for d in result.diagnostics)


def test_a_warm_run_serves_the_same_findings_without_linting(project, monkeypatch):
    cold = run(project)
    counter = Counting(monkeypatch)
    assert run(project) == cold and counter.linted == []
    assert (project / ".ddplint_cache" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_editing_the_file_invalidates_it(project, monkeypatch):
    run(project)
    counter = Counting(monkeypatch)
    (project / "train.py").write_text(SCRIPT.replace("'cuda:0'", "'cuda:1'"))
    assert ("DDP101", 5) in run(project) and counter.linted == ["train.py"]


def test_editing_a_helper_the_findings_depended_on_invalidates_them(project, monkeypatch):
    run(project)
    counter = Counting(monkeypatch)
    run(project)
    assert counter.linted == []
    (project / "helpers.py").write_text(NOT_A_GUARD)
    run(project)
    assert counter.linted == ["train.py"]


def test_a_different_configuration_is_a_different_cache(project, monkeypatch):
    run(project)
    counter = Counting(monkeypatch)
    assert run(project, ignore=("DDP101",)) != run(project)
    assert counter.linted == ["train.py"]  # the new configuration is linted, the first one is served...
    run(project, ignore=("DDP101",))
    assert counter.linted == ["train.py"]  # ...and then the new one too, from its own entry


def test_a_change_to_ddplints_own_code_invalidates_everything(project, monkeypatch):
    run(project)
    counter = Counting(monkeypatch)
    monkeypatch.setattr(cache_mod, "code_hash", lambda: "an edited analyzer")
    run(project)
    assert counter.linted == ["train.py"]


def test_the_code_hash_covers_the_analysis_and_rules_but_not_the_runtime_audit(tmp_path, monkeypatch):
    import shutil

    package = tmp_path / "ddplint"
    shutil.copytree(cache_mod.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache_mod, "PACKAGE", package)

    def digest() -> str:
        cache_mod.code_hash.cache_clear()
        return cache_mod.code_hash()

    original = digest()
    with (package / "lint" / "rules" / "__init__.py").open("a") as rules:
        rules.write("# an edited rule registry\n")
    edited = digest()
    assert edited != original
    with (package / "runtime" / "__init__.py").open("a") as runtime:
        runtime.write("# the runtime audit is not the static analysis\n")
    assert digest() == edited
    cache_mod.code_hash.cache_clear()


def test_cli_no_cache_writes_nothing_and_a_cached_run_prints_the_same(project):
    first = run_cli("--no-cache", "train.py", cwd=project)
    assert not (project / ".ddplint_cache").exists()
    cold = run_cli("train.py", cwd=project)
    warm = run_cli("-v", "train.py", cwd=project)
    assert first.stdout == cold.stdout == warm.stdout
    assert "cache: 1 of 1 files unchanged" in warm.stderr


def test_a_corrupt_cache_is_ignored_and_rewritten(project):
    run_cli("train.py", cwd=project)
    entries = [e for e in (project / ".ddplint_cache").glob("*.json") if not e.name.startswith("rules-")]
    for entry in (project / ".ddplint_cache").glob("*.json"):
        entry.write_text("{broken")
    proc = run_cli("train.py", cwd=project)
    assert proc.returncode == 1 and "DDP101" in proc.stdout
    assert entries and all(isinstance(json.loads(e.read_text()), dict) for e in entries)


def _results_file(project):
    return next(e for e in (project / ".ddplint_cache").glob("*.json") if not e.name.startswith("rules-"))


@pytest.mark.parametrize(
    "shape",
    [
        "[]",
        "GARBAGE",
        "5",
        "entry-5",
        "no-helpers",
        "helpers-5",
        "helper-triple",
        "helper-number",
        "diagnostics-5",
        "diagnostic-5",
        "line-text",
        "fix-edits-5",
        "related-5",
        "warning-5",
        "extra-field",
    ],
)
def test_a_cache_entry_of_another_shape_is_linted_again(project, shape):
    """An entry edited by hand or by another program is ignored, never an internal error or a wrong finding."""
    fresh = run_cli("train.py", cwd=project)
    results = _results_file(project)
    data = json.loads(results.read_text())
    key, entry = next(iter(data.items()))
    first = entry["diagnostics"][0]
    entries = {
        "entry-5": 5,
        "no-helpers": {k: v for k, v in entry.items() if k != "helpers"},
        "helpers-5": {**entry, "helpers": 5},
        "helper-triple": {**entry, "helpers": [[1, 2, 3]]},
        "helper-number": {**entry, "helpers": [[5, None]]},
        "diagnostics-5": {**entry, "diagnostics": 5},
        "diagnostic-5": {**entry, "diagnostics": [5]},
        "line-text": {**entry, "diagnostics": [{**first, "line": "x"}]},
        "fix-edits-5": {**entry, "diagnostics": [{**first, "fix": {"description": "d", "edits": 5, "safe": True}}]},
        "related-5": {**entry, "diagnostics": [{**first, "related": [5]}]},
        "warning-5": {**entry, "warnings": [5]},
        "extra-field": {**entry, "diagnostics": [{**first, "extra": 1}]},
    }
    results.write_text(json.dumps({key: entries[shape]}) if shape in entries else shape)
    proc = run_cli("train.py", cwd=project)
    assert (proc.returncode, proc.stdout, proc.stderr) == (fresh.returncode, fresh.stdout, "")


def test_a_cached_helper_that_became_a_directory_is_linted_again(project):
    run_cli("train.py", cwd=project)
    (project / "helpers.py").unlink()
    (project / "helpers.py").mkdir()
    proc = run_cli("train.py", cwd=project)
    fresh = run_cli("--no-cache", "train.py", cwd=project)
    assert (proc.returncode, proc.stdout, proc.stderr) == (fresh.returncode, fresh.stdout, "")


@pytest.mark.parametrize("which", ["results", "rules"])
def test_a_fifo_as_the_cache_file_does_not_block(project, which):
    run_cli("train.py", cwd=project)
    fresh = run_cli("--no-cache", "train.py", cwd=project)
    cache = project / ".ddplint_cache"
    target = _results_file(project) if which == "results" else next(cache.glob("rules-*.json"))
    target.unlink()
    os.mkfifo(target)
    proc = run_cli("train.py", cwd=project, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (fresh.returncode, fresh.stdout, "")


@pytest.mark.parametrize("created", ["helpers.py", "helpers/__init__.py"])
def test_creating_a_module_an_import_did_not_find_invalidates_the_file(tmp_path, created):
    """The import found nothing when the result was cached; the module written since is read."""
    (tmp_path / "pyproject.toml").write_text("[tool.ddplint]\n")
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom helpers import save\n"
        "dist.init_process_group('gloo')\nsave(1)\ndist.destroy_process_group()\n"
    )
    assert run_cli("train.py", cwd=tmp_path).stdout == "All checks passed (1 file).\n"
    (tmp_path / created).parent.mkdir(exist_ok=True)
    (tmp_path / created).write_text("import torch\n\ndef save(m):\n    torch.save(m, 'm.pt')\n")
    proc = run_cli("train.py", cwd=tmp_path)
    assert proc.returncode == 1 and "train.py:5:1: DDP301 save() saves a checkpoint on every rank" in proc.stdout


def test_creating_a_namespace_package_an_import_did_not_find_invalidates_the_file(tmp_path):
    """No `tools` at all when the result was cached (looked up once for the name): a tools/
    directory without __init__.py, written since, is a package Python imports from."""
    (tmp_path / "pyproject.toml").write_text("[tool.ddplint]\n")
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom tools.ckpt import save\n"
        "dist.init_process_group('gloo')\nsave(1)\ndist.destroy_process_group()\n"
    )
    assert run_cli("train.py", cwd=tmp_path).stdout == "All checks passed (1 file).\n"
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "ckpt.py").write_text("import torch\n\ndef save(m):\n    torch.save(m, 'm.pt')\n")
    proc = run_cli("train.py", cwd=tmp_path)
    assert proc.returncode == 1 and "train.py:5:1: DDP301 save() saves a checkpoint on every rank" in proc.stdout


def test_creating_a_module_that_shadows_the_one_an_import_found_invalidates_the_file(tmp_path):
    """The import found ../helpers.py; a helpers.py beside the script, written since, comes first."""
    (tmp_path / "pyproject.toml").write_text("[tool.ddplint]\n")
    (tmp_path / "helpers.py").write_text("def save(m):\n    print(m)\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom helpers import save\n"
        "dist.init_process_group('gloo')\nsave(1)\ndist.destroy_process_group()\n"
    )
    assert run_cli("sub/train.py", cwd=tmp_path).stdout == "All checks passed (1 file).\n"
    (tmp_path / "sub" / "helpers.py").write_text("import torch\n\ndef save(m):\n    torch.save(m, 'm.pt')\n")
    proc = run_cli("sub/train.py", cwd=tmp_path)
    assert proc.returncode == 1 and "sub/train.py:5:1: DDP301 save() saves a checkpoint on every rank" in proc.stdout


def test_an_init_file_created_above_the_script_invalidates_the_file(tmp_path):
    """A package's __init__.py written since moves the root its imports resolve from: the cached
    result must be what a fresh lint says now."""
    (tmp_path / "pyproject.toml").write_text("[tool.ddplint]\n")
    (tmp_path / "helpers.py").write_text("import torch\n\ndef save(m):\n    torch.save(m, 'm.pt')\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helpers.py").write_text("def save(m):\n    print(m)\n")
    (tmp_path / "pkg" / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom helpers import save\n"
        "dist.init_process_group('gloo')\nsave(1)\ndist.destroy_process_group()\n"
    )
    before = run_cli("pkg/train.py", cwd=tmp_path)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    cached = run_cli("pkg/train.py", cwd=tmp_path)
    fresh = run_cli("--no-cache", "pkg/train.py", cwd=tmp_path)
    assert before.stdout != fresh.stdout  # the new package root changed which helpers.py is read
    assert (cached.returncode, cached.stdout) == (fresh.returncode, fresh.stdout)


def test_editing_the_module_that_puts_a_directory_on_sys_path_invalidates_the_file(tmp_path):
    """The helper was found in lib/, which `_init_paths` put on sys.path; once `_init_paths`
    points elsewhere, the import finds nothing and the finding through the helper goes."""
    (tmp_path / "pyproject.toml").write_text("[tool.ddplint]\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helpers.py").write_text("import torch\n\ndef save(m):\n    torch.save(m, 'm.pt')\n")
    paths = "import os\nimport sys\n\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), {!r}))\n"
    (tmp_path / "_init_paths.py").write_text(paths.format("lib"))
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\nimport _init_paths\nfrom helpers import save\n"
        "dist.init_process_group('gloo')\nsave(1)\ndist.destroy_process_group()\n"
    )
    proc = run_cli("train.py", cwd=tmp_path)
    assert proc.returncode == 1 and "train.py:6:1: DDP301 save() saves a checkpoint on every rank" in proc.stdout
    (tmp_path / "_init_paths.py").write_text(paths.format("other"))
    assert run_cli("train.py", cwd=tmp_path).stdout == "All checks passed (1 file).\n"


def test_the_directories_a_module_puts_on_sys_path_keep_their_end(tmp_path):
    """Inserted directories come before the default places, appended ones after; a helper of
    the module that appends its parameter appends."""
    import libcst as cst

    from ddplint.lint.facts import collect
    from ddplint.lint.import_paths import added_dirs

    source = (
        "import os, sys\nfrom pathlib import Path\n\n"
        "def add(p):\n    sys.path.append(p)\n\n"
        "sys.path.insert(0, str(Path(__file__).resolve().parent / 'lib'))\n"
        "add(os.path.join(os.path.dirname(__file__), 'vendor'))\n"
    )
    front, back = added_dirs(collect(cst.parse_module(source)), tmp_path / "train.py")
    assert (front, back) == ([tmp_path / "lib"], [tmp_path / "vendor"])

"""Which ddplint modules may import which: checked on the source, at any depth of each module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports(module: str) -> set[str]:
    """The ddplint modules `module` imports anywhere in its body, TYPE_CHECKING blocks included."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("ddplint")}


def test_the_analysis_does_not_import_the_engine():
    """The engine imports the analysis (lazily: a run served from the cache skips libcst)."""
    assert not {m for m in imports("ddplint.lint.analysis") if m.startswith("ddplint.lint.engine")}


def test_the_baseline_does_not_import_the_reports():
    assert not {m for m in imports("ddplint.lint.baseline") if m.startswith("ddplint.report")}


def test_the_runtime_registry_imports_nothing_of_ddplint():
    """The static path (the CLI's help) and the launcher import it: no torch, no cycle."""
    assert not imports("ddplint.runtime.registry")


def test_the_guard_and_summary_analyses_do_not_import_the_context():
    """The context builds them and hands them a ProjectResolver: no cycle, not even for types."""
    for module in ("ddplint.lint.guards", "ddplint.lint.summaries", "ddplint.lint.resolver"):
        assert not {m for m in imports(module) if m.startswith("ddplint.lint.context")}, module
    assert not {m for m in imports("ddplint.lint.resolver") if m.startswith(("ddplint.lint.guards", "ddplint.lint.summaries"))}


def test_the_vocabulary_imports_nothing_of_ddplint():
    """Every analysis reads its API names from it: a leaf, never a cycle."""
    assert not imports("ddplint.lint.vocabulary")

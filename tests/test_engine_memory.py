"""The engine lints with Python's cycle collector paused (engine._lint_files). That is only
sound while the analysis leaves no reference cycle behind: a cycle that reaches a file's facts
or tree would keep it in memory until the run ends."""

from __future__ import annotations

import gc

from conftest import FIXTURES

from ddplint import config as config_mod
from ddplint.lint.engine import lint_paths
from ddplint.lint.rules import KNOWN_RULES


def test_linting_leaves_no_tree_or_record_in_a_reference_cycle(tmp_path):
    # a file Python refuses: its SyntaxError, kept for the DDP001 diagnostic, must not hold the
    # frames (and through them the run's helper modules) in a cycle
    broken = tmp_path / "broken.py"
    broken.write_text("import torch.distributed as dist\ndist.init_process_group(\n")
    corpus = [FIXTURES / "lint" / "projects", broken, FIXTURES / "lint" / "process_group", FIXTURES / "lint" / "context"]
    config = config_mod.Config(root=FIXTURES, rules=KNOWN_RULES, select=("ALL",), exclude=())
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage to be read
    try:
        result = lint_paths(corpus, config, jobs=1)
        gc.collect()
        kept = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert result.files > 100 and result.diagnostics  # a real run, with findings and helpers
    assert [name for name in kept if name.startswith(("ddplint.", "libcst."))] == []

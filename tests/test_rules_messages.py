"""Every finding says, in one line, what goes wrong at runtime and how to fix it."""

from fixture_cases import LINT_FIXTURES, load_cases

from ddplint import config as config_mod
from ddplint.lint.engine import lint_paths
from ddplint.lint.rules import KNOWN_RULES


def test_messages_are_one_line_with_a_consequence_and_a_fix():
    config = config_mod.Config(root=LINT_FIXTURES, rules=KNOWN_RULES, select=("ALL",))  # DDP402 is opt-in
    result = lint_paths([case.path for case in load_cases()], config, jobs=1)
    codes = {d.code for d in result.diagnostics}
    assert {
        "DDP201",
        "DDP202",
        "DDP203",
        "DDP204",
        "DDP205",
        "DDP301",
        "DDP302",
        "DDP303",
        "DDP304",
        "DDP401",
        "DDP402",
        "DDP403",
    } <= codes
    for d in result.diagnostics:
        assert "\n" not in d.message, d
        problem, _, fix = d.message.partition("; ")
        assert problem and fix, f"{d.code} message lacks a fix: {d.message}"
        assert ": " in problem, f"{d.code} message lacks a runtime consequence: {d.message}"

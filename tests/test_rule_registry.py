"""The rule registry, the one-module-per-rule layout, the rule docs and the README table agree."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

from ddplint.lint.rules import ALL_RULES, CATALOG, RULES_BY_CODE
from ddplint.lint.rules.base import Rule

ROOT = Path(__file__).resolve().parents[1]
RULES_DIR = ROOT / "ddplint" / "lint" / "rules"


def rule_modules() -> list[Path]:
    return sorted(RULES_DIR.glob("ddp[0-9][0-9][0-9]_*.py"))


def test_each_rule_module_holds_one_registered_rule_named_after_its_file():
    seen = []
    for path in rule_modules():
        module = importlib.import_module(f"ddplint.lint.rules.{path.stem}")
        rules = [
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__
        ]
        assert len(rules) == 1, (path.name, rules)
        rule = rules[0]
        code, _, name = path.stem.partition("_")
        assert (rule.code.lower(), rule.name) == (code, name.replace("_", "-")), path.name
        seen.append(rule)
    assert sorted(seen, key=lambda r: r.code) == sorted(CATALOG, key=lambda r: r.code)
    assert [r.code for r in CATALOG] == sorted(r.code for r in CATALOG)
    assert CATALOG[1:] == ALL_RULES and len(RULES_BY_CODE) == len(CATALOG)


def test_rule_names_come_from_class_names():
    class MissingThingRule(Rule):
        code = "DDP999"

    assert MissingThingRule.name == "missing-thing"
    assert {r.name for r in CATALOG} >= {"syntax-error", "missing-set-epoch", "hard-coded-cuda-index"}


def test_each_rule_has_its_doc_file():
    docs = {p.stem for p in (ROOT / "rules").glob("DDP*.md")}
    assert docs == {f"{r.code}-{r.name}" for r in CATALOG}


def test_readme_rule_table_lists_the_catalog_with_levels():
    table = re.findall(r"^\| (DDP\d{3}) \| ([a-z0-9-]+) \| ([a-z ()-]+) \|", (ROOT / "README.md").read_text(), re.MULTILINE)
    assert table == [(r.code, r.name, r.severity.value + ("" if r.severity.on_by_default else " (opt-in)")) for r in CATALOG]

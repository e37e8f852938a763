"""The rule docs are the user's documentation and their examples are test cases."""

import pytest

from ddplint.catalog import all_docs, doc
from ddplint.lint.rules import CATALOG

REQUIRED_SECTIONS = ["What it finds", "Why it matters on multi-GPU", "Bad", "Good", "How to fix"]
CASES = [(d.code, kind, i) for d in all_docs() for kind in ("Bad", "Good") for i in range(len(d.examples(kind)))]


@pytest.mark.parametrize("rule", CATALOG, ids=lambda r: r.code)
def test_every_rule_has_a_complete_doc(rule):
    rule_doc = doc(rule.code)
    assert rule_doc.markdown.startswith(f"# {rule.code} {rule.name}\n")
    assert list(rule_doc.sections) == REQUIRED_SECTIONS
    assert rule_doc.summary and len(rule_doc.summary) < 1024
    assert rule_doc.examples("Bad") and rule_doc.examples("Good")


@pytest.mark.parametrize("rule", CATALOG, ids=lambda r: r.code)
def test_every_doc_states_the_rules_level_and_default(rule):
    intro = doc(rule.code).markdown.split("\n## ", 1)[0]
    if rule.severity.on_by_default:
        assert f"\nLevel: **{rule.severity.value}**, on by default.\n" in intro
    else:
        assert (
            f"\nLevel: **{rule.severity.value}**, off by default (advisory): enable it with `--extend-select {rule.code}`."
        ) in intro


@pytest.mark.parametrize("code,kind,index", CASES)
def test_doc_examples_behave_as_documented(code, kind, index, lint):
    example = doc(code).examples(kind)[index]
    found = lint(example)
    if kind == "Bad":
        assert code in found, f"{code} Bad example #{index} is not reported"
    else:
        assert code not in found, f"{code} Good example #{index} is reported"

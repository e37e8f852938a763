"""The rule documentation in rules/*.md: one source for --explain, --list-rules and SARIF help."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ddplint.lint.rules import CATALOG, RULES_BY_CODE

FENCE = re.compile(r"```python\n(.*?)```", re.DOTALL)


def docs_dir() -> Path:
    """Installed wheels carry the docs inside the package; a checkout keeps them at its root."""
    packaged = Path(__file__).parent / "_rules"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "rules"


@dataclass(frozen=True)
class RuleDoc:
    code: str
    name: str
    markdown: str
    summary: str  # the first paragraph under the title
    sections: dict[str, str]

    def examples(self, section: str) -> list[str]:
        return FENCE.findall(self.sections.get(section, ""))


class DocError(Exception):
    pass


@cache
def doc(code: str) -> RuleDoc:
    rule = RULES_BY_CODE.get(code)
    if rule is None:
        raise DocError(f"unknown rule {code!r} (see `ddplint --list-rules`)")
    path = docs_dir() / f"{rule.code}-{rule.name}.md"
    try:
        markdown = path.read_text(encoding="utf-8")
    except OSError:
        raise DocError(f"the documentation of {code} is missing ({path})") from None
    return parse(rule.code, rule.name, markdown)


def parse(code: str, name: str, markdown: str) -> RuleDoc:
    body = markdown.split("\n", 1)[1] if markdown.startswith("# ") else markdown
    intro, *rest = re.split(r"^## ", body, flags=re.MULTILINE)
    summary = " ".join(intro.strip().split("\n\n")[0].split())
    sections = {}
    for chunk in rest:
        title, _, text = chunk.partition("\n")
        sections[title.strip()] = text.strip()
    return RuleDoc(code, name, markdown, summary, sections)


def all_docs() -> list[RuleDoc]:
    return [doc(rule.code) for rule in CATALOG]

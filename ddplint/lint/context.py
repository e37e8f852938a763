"""Everything a rule may read about the module being linted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ddplint.config import Config
from ddplint.lint.facts import CallSite, ModuleFacts
from ddplint.lint.project import ProjectIndex

FOLLOW_DEPTH = 3  # how many project function calls deep `reaches` looks


@dataclass
class LintContext:
    path: Path
    module: cst.Module
    facts: ModuleFacts
    project: ProjectIndex
    config: Config
    _reach_cache: dict = field(default_factory=dict)

    def function_body_calls(self, facts: ModuleFacts, function: str) -> list[CallSite]:
        prefix = function + "."
        return [c for c in facts.calls if c.function == function or c.function.startswith(prefix)]

    def resolve_function(self, facts: ModuleFacts, path: Path, name: str | None):
        """The (facts, path, function name) that a callee names, in this module or the project."""
        if name is None:
            return None
        if name in facts.functions:
            return facts, path, name
        if name.startswith("torch.") or name.split(".")[0] in {"os", "sys", "torch"}:
            return None
        found = self.project.resolve(path, name)
        if found is None:
            return None
        module_path, module_facts, attr = found
        if attr and attr in module_facts.functions:
            return module_facts, module_path, attr
        return None

    def reaches(self, site: CallSite, targets: frozenset[str], facts: ModuleFacts | None = None,
                path: Path | None = None, depth: int = FOLLOW_DEPTH) -> bool:
        """A call to a project function that (transitively) calls one of `targets`."""
        facts = facts or self.facts
        path = path or self.path
        if site.name in targets:
            return True
        if depth == 0:
            return False
        resolved = self.resolve_function(facts, path, site.name)
        if resolved is None:
            return False
        key = (id(resolved[0]), resolved[2], targets)
        if key not in self._reach_cache:
            self._reach_cache[key] = False  # recursion guard
            inner_facts, inner_path, function = resolved
            self._reach_cache[key] = any(
                self.reaches(inner, targets, inner_facts, inner_path, depth - 1)
                for inner in self.function_body_calls(inner_facts, function)
            )
        return self._reach_cache[key]

    def anywhere(self, targets: frozenset[str]) -> list[CallSite]:
        """Call sites of this module that are, or lead through project helpers to, `targets`."""
        return [c for c in self.facts.calls if self.reaches(c, targets)]

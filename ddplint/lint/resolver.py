"""What the guard and summary analyses read of the module being linted and its project.

`LintContext` is the one implementation; the analyses name this protocol instead, so that the
context (which builds them) and they do not depend on each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Protocol

from ddplint.config import Config
from ddplint.lint.facts import CallSite, ModuleFacts


class Resolved(NamedTuple):
    """A function a call names, found in the linted module or the project."""

    facts: ModuleFacts
    path: Path
    function: str  # its dotted name in that module: "save", "Trainer.fit", "Logger.__init__"


class ProjectResolver(Protocol):
    path: Path  # the module being linted
    facts: ModuleFacts  # its facts
    config: Config

    def resolve_function(self, facts: ModuleFacts, path: Path, name: str | None, hops: int = 2) -> Resolved | None: ...

    def method_target(self, facts: ModuleFacts, site: CallSite) -> str | None: ...

    def member_name(self, facts: ModuleFacts, name: str | None, function: str) -> str | None: ...

    def imported_project_files(self, depth: int = 1) -> list[tuple[Path, ModuleFacts]]: ...

    def spawn_targets(self, facts: ModuleFacts) -> set[str]: ...

    def runs_nowhere(self, site: CallSite) -> bool: ...

    def module_named(self, facts: ModuleFacts, path: Path, name: str) -> tuple[ModuleFacts, Path] | None: ...

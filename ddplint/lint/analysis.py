"""The analysis of one parsed module: libcst, the facts pass and the rules, turned into
positioned diagnostics. This is what engine.py hands a file to; importing it costs libcst's
import, which a run served from the cache avoids."""

from __future__ import annotations

import os
import re
from pathlib import Path

import libcst as cst

from ddplint.config import Config
from ddplint.diagnostics import Diagnostic, Edit, FileError, Fix, Related
from ddplint.lint import facts as facts_mod
from ddplint.lint import limits, parsing
from ddplint.lint import positions as positions_mod
from ddplint.lint.context import LintContext
from ddplint.lint.handed_objects import with_handed_bindings
from ddplint.lint.liveness import dead_definitions, unreachable_statements
from ddplint.lint.noqa import line_suppresses
from ddplint.lint.project import Lookup, ProjectIndex
from ddplint.lint.result import LintResult
from ddplint.lint.rules import ALL_RULES
from ddplint.lint.rules.base import Finding, InsertBefore, Inside, Replace, Rule


def enabled_rules(config: Config) -> list[Rule]:
    return [rule() for rule in ALL_RULES if config.enabled(rule.code)]


class RecordingIndex(ProjectIndex):
    """The project index, noting which helper modules each file's analysis read, and which
    module files its imports looked for and did not find (for the cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[Path] = set()
        self.missing: set[Path] = set()
        self._refused: dict[Path, bool] = {}

    def _lookup(self, importer: Path, qualified: str) -> Lookup:
        lookup = super()._lookup(importer, qualified)
        self.missing.update(lookup.absent)
        return lookup

    def facts_for(self, path: Path):
        real = self.real(path)
        self.read.add(real)
        if real not in self._refused:  # parsed once for the run, on a CPU budget of its own
            try:
                with limits.own_budget():
                    self._refused[real] = super().facts_for(path) is None
            except limits.OutOfTime:
                self._refused[real] = True
        return None if self._refused[real] else super().facts_for(path)


def parse_newer(text: str) -> cst.Module | None:
    """libcst's parse, None when it refuses the text: of a file whose nesting the tokens bound,
    or of a file the running Python refused (libcst's grammar knows newer syntax: PEP 701
    f-strings with nested quotes, `type` statements)."""
    try:
        return parsing.parse_module(text)
    except cst.ParserSyntaxError:
        return None


def analyse(path, text, lines, config, rules, project, result: LintResult, module: cst.Module | None = None) -> None:
    """Parse (or reuse `module`, or a helper's parse), collect the facts, run the rules, into `result`."""
    cached = project.parsed(path, text)  # a helper module another script imported
    if cached is not None:
        module, facts = cached
    else:
        if module is None:
            try:
                module = parsing.parse_module(text)
            except cst.ParserSyntaxError as exc:  # Python accepted it, libcst did not
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "parse error"
                result.errors.append(FileError(str(path), f"libcst cannot parse this file ({first}); skipped"))
                return
        facts = facts_mod.collect(module, project.star_names(path, module))
        project.remember(path, text, module, facts)
    ctx = LintContext(path, module, facts, project, config)
    handed = with_handed_bindings(ctx)
    if handed is not facts:  # what helpers set on the objects they are handed: answers change
        ctx = LintContext(path, module, handed, project, config)
    ignored = config.ignored_in(path)
    found: list[tuple[Rule, Finding]] = []
    for rule in rules:
        if rule.code in ignored:
            continue
        if not rule.applies(ctx):
            continue
        try:
            found.extend((rule, finding) for finding in rule.check(ctx))
        except (RecursionError, MemoryError):
            raise
        except Exception as exc:  # one rule's bug must not stop the run
            result.internal_errors.append(FileError(str(path), f"internal error in {rule.code}: {type(exc).__name__}: {exc}"))
    if found:
        dead = [*(dead_definitions(module) if facts.is_script else []), *unreachable_statements(module)]
        positions = positions_mod.ranges(module, [*_located(found), *dead], text)
        spans = [(positions[id(node)].start.line, positions[id(node)].end.line) for node in dead]
        # one node can match a rule twice (`device=torch.device("cuda")`); one line can hold the
        # same mistake twice in the same words (`with open(a, "w") as f, open(b, "w") as g:`)
        seen: set[tuple] = set()
        for rule, finding in found:
            diagnostic = _diagnostic(path, rule, finding, positions, module, lines, project)
            if any(first <= diagnostic.line <= last for first, last in spans):
                continue  # in a function or class the script never reaches (liveness.py)
            where = (diagnostic.code, diagnostic.line, diagnostic.col, diagnostic.end_line, diagnostic.end_col)
            said = (diagnostic.code, diagnostic.line, diagnostic.message) if diagnostic.fix is None else where
            if where not in seen and said not in seen and not _suppressed(diagnostic, lines):
                seen |= {where, said}
                result.diagnostics.append(diagnostic)


def _located(found: list[tuple[Rule, Finding]]) -> list[cst.CSTNode]:
    """The nodes whose positions the findings need: the reported nodes and what their fixes edit."""
    nodes = []
    for _, finding in found:
        nodes.append(finding.node)
        edit = finding.fix.edit if finding.fix is not None else None
        if isinstance(edit, Replace):
            nodes.append(edit.node)
        elif edit is not None:
            decorators = getattr(edit.before, "decorators", ())
            nodes.append(decorators[0] if decorators else edit.before)
    return nodes


def _diagnostic(path, rule, finding, positions, module, lines, project: ProjectIndex) -> Diagnostic:
    where = positions[id(finding.node)]
    start, end = where.start, where.end
    fix = None
    if finding.fix is not None:
        fix = Fix(finding.fix.description, (_edit(finding.fix.edit, positions, module, lines),), finding.fix.safe)
    return Diagnostic(
        path=str(path),
        line=start.line,
        col=start.column + 1,
        end_line=end.line,
        end_col=end.column + 1,
        code=rule.code,
        message=finding.message,
        severity=rule.severity,
        fix=fix,
        source_line=lines[start.line - 1] if 0 < start.line <= len(lines) else "",
        related=tuple(_related(path, inside, project) for inside in finding.inside),
    )


def _related(path: Path, inside: Inside, project: ProjectIndex) -> Related:
    """The place inside a helper, named as the linted file is (relative to the working
    directory when the user named a relative path)."""
    line, col = project.position(inside.path, inside.node) or (1, 1)
    shown = str(inside.path) if Path(path).is_absolute() else os.path.relpath(inside.path)
    return Related(shown, line, col, inside.message)


def _edit(edit: Replace | InsertBefore, positions, module: cst.Module, lines: list[str]) -> Edit:
    if isinstance(edit, Replace):
        where = positions[id(edit.node)]
        return Edit(
            (where.start.line, where.start.column + 1),
            (where.end.line, where.end.column + 1),
            module.code_for_node(edit.replacement),
        )
    decorators = getattr(edit.before, "decorators", ())
    line = positions[id(decorators[0] if decorators else edit.before)].start.line  # a decorated def: its first `@`
    own = lines[line - 1] if 0 < line <= len(lines) else ""
    indent = own[: len(own) - len(own.lstrip(" \t"))]
    code = module.code_for_node(edit.statement)
    rows = re.split(r"(?<=\n)|(?<=\r)(?!\n)", code)  # after each line break, as Python counts them
    text = "".join(indent + row if row.strip() else row for row in rows)
    # the comments and blank lines above a statement (and above its first decorator) stay with it
    above = line - len(edit.before.leading_lines) - (len(decorators[0].leading_lines) if decorators else 0)
    return Edit((above, 1), (above, 1), text)


def _suppressed(diagnostic: Diagnostic, lines: list[str]) -> bool:
    return 0 < diagnostic.line <= len(lines) and line_suppresses(lines[diagnostic.line - 1], diagnostic.code)

"""The static lint as the command line runs it: options -> configuration -> fixes -> lint ->
baseline -> report -> exit status. cli.py parses the options; everything after is here."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

import click

from ddplint.report.locations import printable

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
STDIN = "-"
TEXT_FORMATS = ("text", "concise")  # for people: colour, and --statistics in place of the list


@dataclass(frozen=True)
class LintOptions:
    select: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()  # replaces the configured excludes
    extend_exclude: tuple[str, ...] = ()  # added to them
    fail_on: str | None = None  # a level's name; None: the configuration's (default info)
    output_format: str = "text"
    output: Path | None = None
    config_path: Path | None = None
    force_exclude: bool = False
    exit_zero: bool = False
    fix: bool = False
    diff: bool = False
    add_noqa: bool = False
    unsafe_fixes: bool = False
    show_fixes: bool = False
    statistics: bool = False
    jobs: int = 0
    quiet: bool = False
    verbose: bool = False
    color: str = "auto"
    show_source: bool | None = None  # None: on a terminal
    stdin_filename: str | None = None
    respect_gitignore: bool = True
    cache: bool = True
    baseline: Path | None = None
    write_baseline: Path | None = None


def fail(message: str) -> NoReturn:
    click.echo(f"ddplint: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def split_list(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated and comma-separated option values (`--select DDP1,DDP301 --select DDP4`)."""
    return tuple(item.strip() for value in values for item in value.split(",") if item.strip())


def run(paths: tuple[str, ...], options: LintOptions) -> NoReturn:
    from ddplint.lint.baseline import BaselineError
    from ddplint.report.options import ReportOptions

    started = time.perf_counter()
    paths = paths or (".",)  # as ruff: no path lints the working directory
    if STDIN in paths and len(paths) > 1:
        fail("`-` (standard input) cannot be combined with other paths")
    if STDIN in paths and (options.fix or options.diff or options.add_noqa):
        fail("--fix, --diff and --add-noqa rewrite files; they do not read standard input")
    if options.add_noqa and (options.fix or options.diff):
        fail("--add-noqa cannot be combined with --fix or --diff")
    config = _config(paths, options)
    _verbose(options, f"configuration: {config.source or 'defaults'} (project root {config.root})")
    if options.add_noqa:
        _add_noqa(paths, config)

    fix_failed = False
    if options.diff:
        report = _fix(paths, config, options, write=False)
        sys.exit(EXIT_ERROR if report.errors else EXIT_FINDINGS if report.files else EXIT_CLEAN)
    if options.fix:
        fix_failed = bool(_fix(paths, config, options, write=True).errors)

    result = _lint_stdin(config, options) if paths == (STDIN,) else _lint_files(paths, config, options)
    baselined = 0
    try:
        if options.write_baseline is not None:
            from ddplint.lint import baseline

            count = baseline.write(options.write_baseline, result.diagnostics)
            click.echo(f"ddplint: recorded {count} finding{'s' * (count != 1)} in {options.write_baseline}", err=True)
            result.diagnostics = []
        elif options.baseline is not None or config.baseline is not None:
            from ddplint.lint import baseline

            result.diagnostics, baselined = baseline.new_findings(result.diagnostics, options.baseline or config.baseline)
    except BaselineError as exc:
        fail(str(exc))

    for error in [*result.errors, *result.internal_errors]:
        click.echo(f"ddplint: error: {printable(error.path)}: {error.message}", err=True)
    if not options.quiet:
        for warning in result.warnings:
            where = f"{printable(warning.path)}:{warning.line}" if warning.line else printable(warning.path)
            click.echo(f"ddplint: warning: {where}: {warning.message}", err=True)

    terminal = options.output is None and sys.stdout.isatty()
    color = options.color == "always" or (options.color == "auto" and terminal and "NO_COLOR" not in os.environ)
    report_options = ReportOptions(
        color=color and options.output_format in TEXT_FORMATS,
        show_source=terminal if options.show_source is None else options.show_source,
        show_fixes=options.show_fixes,
        quiet=options.quiet,
        unsafe_fixes=options.unsafe_fixes,
        baselined=baselined,
    )
    if options.statistics and options.output_format in TEXT_FORMATS:
        rendered = _statistics(result, report_options)
    else:
        from ddplint.report import FORMATS

        rendered = FORMATS[options.output_format](result, config, report_options)
    _write(rendered, options.output, report_options.color)
    _verbose(options, f"{result.files} file{'s' * (result.files != 1)} in {time.perf_counter() - started:.2f} s")
    if result.errors or result.internal_errors or fix_failed:
        sys.exit(EXIT_ERROR)
    failing = any(d.severity.rank >= config.fail_on.rank for d in result.diagnostics)
    sys.exit(EXIT_FINDINGS if failing and not options.exit_zero else EXIT_CLEAN)


def _config(paths: tuple[str, ...], options: LintOptions):
    from ddplint import config as config_mod

    try:
        if options.config_path is not None:
            if not options.config_path.is_file():
                fail(f"config file {options.config_path} does not exist")
            start = options.config_path
        else:
            named = [options.stdin_filename or "." if p == STDIN else p for p in paths]
            start = Path(os.path.commonpath([os.path.abspath(p) for p in named]))
        rules = _rules(config_mod.root_of(start), options)
        config = config_mod.load(start, rules)
        changes: dict = {"force_exclude": options.force_exclude}
        if not options.respect_gitignore:
            changes["respect_gitignore"] = False
        for flag, attr, values in (
            ("--select", "select", options.select),
            ("--extend-select", "extend_select", options.extend_select),
            ("--ignore", "ignore", options.ignore),
        ):
            if values:
                changes[attr] = config_mod.resolve_selectors(split_list(values), rules, flag)
        if options.extend_select:
            changes["extend_select"] = (*config.extend_select, *changes["extend_select"])
        if options.exclude:
            changes["exclude"] = split_list(options.exclude)
        if options.extend_exclude:
            changes["extend_exclude"] = (*config.extend_exclude, *split_list(options.extend_exclude))
        if options.fail_on is not None:
            changes["fail_on"] = config_mod.parse_level(options.fail_on, "--fail-on")
        return replace(config, **changes)
    except config_mod.ConfigError as exc:
        fail(str(exc))


def _rules(root: Path, options: LintOptions):
    if options.cache:
        from ddplint.lint.cache import known_rules

        return known_rules(root)
    from ddplint.lint.rules import KNOWN_RULES

    return KNOWN_RULES


def _lint_files(paths, config, options: LintOptions):
    from ddplint.lint.engine import lint_paths

    cache = None
    if options.cache:
        from ddplint.lint.cache import ResultCache

        cache = ResultCache(config)
    result = lint_paths([Path(p) for p in paths], config, jobs=options.jobs, cache=cache)
    if cache is not None:
        _verbose(options, f"cache: {cache.hits} of {result.files} files unchanged ({cache.file})")
    return result


def _lint_stdin(config, options: LintOptions):
    """`-`: the source on standard input, reported under --stdin-filename (for editors and pipes)."""
    from ddplint.diagnostics import FileError
    from ddplint.lint.engine import LintResult, enabled_rules, lint_text
    from ddplint.lint.notebook import is_notebook, notebook_source
    from ddplint.lint.project import ProjectIndex
    from ddplint.lint.source import MAX_BYTES, SourceError, decode_source

    name = options.stdin_filename or STDIN
    path = Path(name)
    data = sys.stdin.buffer.read(MAX_BYTES + 1)
    try:
        text = decode_source(data)
        notebook = notebook_source(text) if is_notebook(name) else None
    except SourceError as exc:
        return LintResult(errors=[FileError(name, str(exc))], files=1)
    source = notebook.text if notebook is not None else text
    result = lint_text(path, source, config, enabled_rules(config), ProjectIndex())
    if notebook is not None:
        result.diagnostics = [notebook.map_diagnostic(d) for d in result.diagnostics]
    return result


def _fix(paths, config, options: LintOptions, write: bool):
    """--fix (write=True) or --diff (print what --fix would change); returns the FixReport."""
    import difflib

    from ddplint.lint.fixes import fix_paths

    report = fix_paths([Path(p) for p in paths], config, write=write, unsafe=options.unsafe_fixes)
    if not write:
        for changed in report.files:
            name = printable(str(changed.path))
            click.echo(
                "".join(
                    difflib.unified_diff(
                        changed.before.splitlines(keepends=True), changed.after.splitlines(keepends=True), name, name
                    )
                ),
                nl=False,
            )
    for error in report.errors:
        click.echo(f"ddplint: error: {printable(error.path)}: {error.message}", err=True)
    if report.fixed or not write:
        files = len(report.files)
        click.echo(
            f"{'Fixed' if write else 'Would fix'} {report.fixed} problem{'s' * (report.fixed != 1)} "
            f"in {files} file{'s' * (files != 1)}.",
            err=True,
        )
    if options.show_fixes and write:
        for changed in report.files:
            for code, count in sorted(changed.codes.items()):
                click.echo(f"  {printable(str(changed.path))}: {count} × {code}", err=True)
    return report


def _add_noqa(paths, config) -> NoReturn:
    """--add-noqa: a `# noqa: CODE` on the first line of every finding, then exit."""
    from ddplint.lint.add_noqa import add_noqa_paths

    report = add_noqa_paths([Path(p) for p in paths], config)
    for skipped in report.skipped:
        click.echo(f"ddplint: warning: {skipped.path}:{skipped.line}: {skipped.message}", err=True)
    for error in report.errors:
        click.echo(f"ddplint: error: {error.path}: {error.message}", err=True)
    files = len(report.files)
    click.echo(f"Added `# noqa` to {report.lines} line{'s' * (report.lines != 1)} in {files} file{'s' * (files != 1)}.", err=True)
    sys.exit(EXIT_ERROR if report.errors else EXIT_CLEAN)


def _statistics(result, options) -> str:
    """--statistics: how often each rule fired, most frequent first (as ruff prints it)."""
    from ddplint.lint.rules import RULES_BY_CODE
    from ddplint.report.options import fixable

    counts = Counter(d.code for d in result.diagnostics)
    fixes = Counter(d.code for d in result.diagnostics if fixable(d.fix, options))
    width = max((len(str(n)) for n in counts.values()), default=1)
    lines = []
    for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        rule = RULES_BY_CODE.get(code)
        mark = "[*]" if fixes[code] else "   "
        lines.append(f"{count:>{width}}  {code}  {mark} {rule.name if rule else ''}".rstrip())
    total = sum(counts.values())
    if not options.quiet:
        lines.append(
            f"Found {total} problem{'s' * (total != 1)}."
            if total
            else f"All checks passed ({result.files} file{'s' * (result.files != 1)})."
        )
    return "".join(line + "\n" for line in lines)


def _write(rendered: str, output: Path | None, color: bool = False) -> None:
    if output is None:
        click.echo(rendered, nl=False, color=color)  # click strips ANSI codes off a terminal unless told
        return
    try:
        output.write_text(rendered, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")


def _verbose(options: LintOptions, message: str) -> None:
    if options.verbose:
        click.echo(f"ddplint: {message}", err=True)

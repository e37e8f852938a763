"""Command line: options -> mode (lint, list, explain, runtime audit) -> exit code."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from ddplint import __version__
from ddplint.report import FORMATS
from ddplint.runtime.registry import CKPT_RESTART, IO_SANDBOX, PERF_SCALING

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 128 + 2  # 128 + SIGINT: what the shell reports for Ctrl-C, and ruff exits with
# Options of the static lint that the runtime audit does not take (cli() hands them to lint_command).
LINT_ONLY = {
    "extend_select": "extend_select",
    "unsafe_fixes": "unsafe_fixes",
    "show_fixes": "show_fixes",
    "statistics": "statistics",
    "color": "color",
    "show_source": "show_source",
    "stdin_filename": "stdin_filename",
    "respect_gitignore": "respect_gitignore",
    "use_cache": "cache",
    "baseline_path": "baseline",
    "write_baseline": "write_baseline",
    "exclude": "exclude",
    "extend_exclude": "extend_exclude",
    "fail_on": "fail_on",
    "add_noqa": "add_noqa",
}
LEVELS = "error, warning, info"


def _fail(message: str) -> None:
    click.echo(f"ddplint: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Exit status: 0 no findings, 1 findings at or above --fail-on (or a runtime check FAILed), "
    "2 usage error, unreadable input or internal error, 130 interrupted (Ctrl-C).",
)
@click.argument("paths", nargs=-1)
@click.option(
    "--select",
    multiple=True,
    metavar="RULES",
    help="Comma-separated rule codes, prefixes or names to enable (e.g. DDP1,DDP301,"
    "missing-set-epoch; ALL for every rule). Default: the error and warning rules.",
)
@click.option(
    "--extend-select",
    multiple=True,
    metavar="RULES",
    help="Rules to enable in addition to those selected (e.g. the info rule DDP402).",
)
@click.option("--ignore", multiple=True, metavar="RULES", help="Comma-separated rule codes, prefixes or names to disable.")
@click.option(
    "--fail-on",
    metavar="LEVEL",
    help=f"Exit 1 only for findings of this level or above ({LEVELS}); the others are still "
    "reported. Default: info, every finding (config: fail-on).",
)
@click.option(
    "--exclude",
    multiple=True,
    metavar="PATTERNS",
    help="Comma-separated glob patterns to skip, replacing the configured and default excludes.",
)
@click.option("--extend-exclude", multiple=True, metavar="PATTERNS", help="Glob patterns to skip in addition to the excludes.")
@click.option(
    "--output-format",
    "--format",
    "output_format",
    type=click.Choice(list(FORMATS)),
    default="text",
    show_default=True,
    help="Output format: concise is one line per finding, never with source; gitlab is GitLab "
    "Code Quality JSON; junit is JUnit XML (--format is the same option).",
)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to FILE instead of stdout."
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the configuration from this file ([tool.ddplint] in a pyproject.toml, or a "
    "ddplint.toml) instead of the nearest one.",
)
@click.option("--force-exclude", is_flag=True, help="Apply `exclude` also to files named on the command line (for pre-commit).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--fix", is_flag=True, help="Apply the safe fixes (with --unsafe-fixes, all) in place, then report what is left.")
@click.option("--diff", is_flag=True, help="Print what --fix would change as a unified diff; change no file.")
@click.option(
    "--add-noqa",
    is_flag=True,
    help="Add `# noqa: CODE` to the lines with findings (merging codes into an existing noqa), and exit.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Worker processes for linting at most; 0: one per core (at most 8), started only "
    "when the files are large enough to pay for them.",
)
@click.option("--unsafe-fixes", is_flag=True, help="Also apply (and mark [*]) the fixes that may change behaviour.")
@click.option("--show-fixes", is_flag=True, help="Show each fixable finding's fix; with --fix, what was fixed.")
@click.option("--statistics", is_flag=True, help="Count the findings per rule instead of listing them.")
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour the text report (auto: on a terminal, unless NO_COLOR is set).",
)
@click.option(
    "--show-source/--no-show-source",
    default=None,
    help="Print the source line and a caret under each finding (default: on a terminal).",
)
@click.option("--stdin-filename", metavar="NAME", help="The file name to report for `-` (standard input).")
@click.option(
    "--no-respect-gitignore",
    "respect_gitignore",
    is_flag=True,
    flag_value=False,
    default=True,
    help="Lint files that .gitignore excludes, too.",
)
@click.option(
    "--no-cache",
    "use_cache",
    is_flag=True,
    flag_value=False,
    default=True,
    help="Neither read nor write .ddplint_cache/ at the project root.",
)
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Report only findings not recorded in FILE (config: `baseline`).",
)
@click.option(
    "--write-baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Record every current finding in FILE and exit 0.",
)
@click.option(
    "--list-rules",
    is_flag=True,
    help="List every rule: code, name, level, whether it is on by default (default) or must be selected (opt-in), summary.",
)
@click.option("--explain", metavar="CODE", help="Print the documentation of a rule.")
@click.option(
    "--runtime",
    is_flag=True,
    help="Audit at runtime, torchrun's way: `ddplint --runtime [OPTIONS] SCRIPT [SCRIPT ARGS]` "
    "(everything after SCRIPT is the script's); with no SCRIPT, the machine checks and a "
    "built-in all_reduce only.",
)
@click.option(
    "--nproc-per-node", type=click.IntRange(min=1), help="[runtime] Processes per node; default: visible GPUs, or 2 without GPUs."
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "gloo", "nccl"]),
    default="auto",
    show_default=True,
    help="[runtime] Process-group backend; gloo also overrides a script's hard-coded nccl.",
)
@click.option(
    "--steps", type=click.IntRange(min=1), default=8, show_default=True, help="[runtime] Batches per epoch per DataLoader."
)
@click.option(
    "--epochs",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="[runtime] Truncated epochs of the training loader.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="[runtime] Seconds for the whole audit; a hang past it is reported.",
)
@click.option(
    "--rdzv-timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="[runtime] Seconds for rendezvous and process-group init.",
)
@click.option(
    "--nnodes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="[runtime] Number of nodes; run ddplint on each (or one srun task per node: SLURM_* is read).",
)
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True, help="[runtime] Rank of this node.")
@click.option("--master-addr", default="127.0.0.1", show_default=True, help="[runtime] Address of node 0.")
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    help="[runtime] Port on node 0; default: a free one (required with --nnodes > 1).",
)
@click.option("--rdzv-backend", help="[runtime] torchrun rendezvous backend (e.g. c10d).")
@click.option("--rdzv-endpoint", help="[runtime] torchrun rendezvous endpoint HOST:PORT.")
@click.option(
    "--no-sandbox",
    "no_sandbox",
    is_flag=True,
    help="[runtime] Run the job without its own namespaces and copy-on-write layer (only "
    f"Python's file calls are redirected then; see {IO_SANDBOX}).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="[runtime] cpu: run a CUDA script on the CPU, its CUDA placement mapped there and nccl made "
    "gloo (auto: when no GPU is visible); cuda: never map.",
)
@click.option(
    "--mapped-gpus",
    type=click.IntRange(min=1),
    help="[runtime] With CUDA mapped to the CPU: how many GPUs each process sees (default: one "
    "per process on the node). A script that starts one worker per GPU itself (mp.spawn) is "
    "audited with --nproc-per-node 1 --mapped-gpus 2.",
)
@click.option(
    "--scaling",
    is_flag=True,
    help="[runtime] Also run the same steps with 1 process and report the throughput of each "
    f"process count and the scaling efficiency ({PERF_SCALING}); runs the script a second time.",
)
@click.option(
    "--resume-args",
    metavar="ARGS",
    help="[runtime] After the audit, start the script again with these arguments (one quoted "
    "string, e.g. '--resume out/ckpt.pt'), from the first checkpoint it saved, and compare its first "
    f"batch, weights and loss with the run that went on ({CKPT_RESTART}).",
)
@click.option(
    "--allow-no-data",
    is_flag=True,
    help="[runtime] A run in which no rank reached a DataLoader batch is not a failure (a script "
    "without a DataLoader); by default nothing audited exits 1.",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Show more detail; under --runtime, stream the ranks' output, each line prefixed by its rank.",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="Lint: the findings only, no summary or warnings. Runtime text report: only the checks that did not PASS.",
)
@click.version_option(__version__, "--version", prog_name="ddplint")
def cli(
    paths: tuple[str, ...],
    select,
    ignore,
    output_format,
    output,
    config_path,
    force_exclude,
    exit_zero,
    fix,
    diff,
    jobs,
    list_rules,
    explain,
    runtime,
    **runtime_options,
) -> None:
    """Find distributed-training mistakes in PyTorch scripts.

    \b
    ddplint                             lint the working directory (static, no torch needed)
    ddplint train.py src/ nb.ipynb      lint files, directories, notebooks
    ddplint --extend-select DDP402 .    also the info-level rules you name (off by default)
    ddplint --fail-on error .           report every finding, exit 1 only for error-level ones
    ddplint --baseline base.json .      only findings not recorded by --write-baseline base.json
    ddplint rules                       list the rules, their levels and defaults (--list-rules)
    ddplint --explain DDP101            show a rule's documentation
    ddplint --runtime train.py ARGS     run the script under torchrun and audit it
    ddplint --runtime                   the machine checks and an all_reduce, no script
    ddplint --runtime --nnodes 2 --node-rank R --master-addr HOST --master-port P train.py
                                        the same on each of two nodes; node 0 prints the report
    """
    lint_options = {option: runtime_options.pop(name) for name, option in LINT_ONLY.items()}
    if list_rules:
        _list_rules()
    elif explain:
        _explain(explain)
    elif runtime:
        _runtime(paths, output_format, output, runtime_options)
    else:
        from ddplint.lint_command import LintOptions, run

        try:
            run(
                paths,
                LintOptions(
                    select=select,
                    ignore=ignore,
                    output_format=output_format,
                    output=output,
                    config_path=config_path,
                    force_exclude=force_exclude,
                    exit_zero=exit_zero,
                    fix=fix,
                    diff=diff,
                    jobs=jobs,
                    verbose=runtime_options.get("verbose", False),
                    quiet=runtime_options.get("quiet", False),
                    **lint_options,
                ),
            )
        except KeyboardInterrupt:  # click would print "Aborted!" and exit 1
            sys.exit(EXIT_INTERRUPTED)


def runtime_argv(args: list[str]) -> list[str]:
    """torchrun's convention under --runtime: ddplint's options come before the script, and
    everything after the script path is the script's. Rewritten as `OPTIONS -- SCRIPT ARGS`
    for click; a `--` right after the script (the older form) is dropped."""
    takes_value = {
        name: not (p.is_flag or p.count) for p in cli.params if isinstance(p, click.Option) for name in p.opts + p.secondary_opts
    }
    head: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return args
        if arg.startswith("-") and arg != "-":
            head.append(arg)
            if "=" not in arg and takes_value.get(arg, False) and i + 1 < len(args):
                head.append(args[i + 1])
                i += 1
            i += 1
            continue
        if "--runtime" not in head:
            return args
        rest = args[i + 1 :]
        return [*head, "--", arg, *(rest[1:] if rest[:1] == ["--"] else rest)]
    return args


def rules_command(args: list[str]) -> list[str]:
    """`ddplint rules` is `ddplint --list-rules` (as ruff's `ruff rule --all`), unless a file or
    directory named `rules` is here: then it is linted, as any path is."""
    return ["--list-rules"] if args == ["rules"] and not os.path.lexists("rules") else args


def main(args: list[str] | None = None) -> None:
    """Console entry point: click's own handling, plus one line instead of a traceback."""
    try:
        argv = rules_command(sys.argv[1:] if args is None else list(args))
        cli.main(args=runtime_argv(argv), prog_name="ddplint")
    except Exception as exc:  # a bug in ddplint; the user gets one line and exit 2
        _fail(f"internal error: {type(exc).__name__}: {exc}")


def _list_rules() -> None:
    from ddplint.catalog import DocError, doc
    from ddplint.lint.rules import CATALOG

    width = max(len(rule.name) for rule in CATALOG)
    for rule in CATALOG:
        try:
            summary = doc(rule.code).summary
        except DocError as exc:
            _fail(str(exc))
        default = "default" if rule.severity.on_by_default else "opt-in"
        click.echo(f"{rule.code}  {rule.name:<{width}}  {rule.severity.value:<7}  {default:<7}  {summary}")
    sys.exit(EXIT_CLEAN)


def _explain(code: str) -> None:
    from ddplint.catalog import DocError, doc

    try:
        click.echo(doc(code.strip().upper()).markdown.rstrip())
    except DocError as exc:
        _fail(str(exc))
    sys.exit(EXIT_CLEAN)


def _runtime(paths, output_format, output, options) -> None:
    from ddplint.runtime.options import RuntimeOptions

    script, *script_args = paths or (None,)
    if output_format not in {"text", "json"}:
        _fail("--runtime supports --format text or json")
    from ddplint.runtime.audit import run_audit

    sandbox = not options.pop("no_sandbox")
    resume = options.pop("resume_args")
    try:
        resume_args = None if resume is None else tuple(shlex.split(resume))
    except ValueError as exc:
        _fail(f"--resume-args: {exc}")
    sys.exit(
        run_audit(
            RuntimeOptions(
                script=None if script is None else Path(script),
                script_args=tuple(script_args),
                output_format=output_format,
                output=output,
                sandbox=sandbox,
                resume_args=resume_args,
                **options,
            )
        )
    )

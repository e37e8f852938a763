"""DDP403: MASTER_PORT or MASTER_ADDR hard-coded in a script that torchrun launches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint import constants
from ddplint.lint.context import LintContext
from ddplint.lint.facts import Assignment, CallSite, ModuleFacts, local_rank_flag, never_named, starts_own_workers
from ddplint.lint.helpers import ask_helper
from ddplint.lint.names import arg, callee_text, dotted, has_star_kwargs, int_value, names_in, reference, string_value
from ddplint.lint.rules.base import Finding, Inside, Rule
from ddplint.lint.summaries import Effect
from ddplint.lint.vocabulary import INIT_PG

RENDEZVOUS = ("MASTER_PORT", "MASTER_ADDR")


class HardCodedMasterPort(Rule):
    """Finds MASTER_PORT or MASTER_ADDR set by a script that torchrun launches."""

    code = "DDP403"
    severity = Severity.ERROR

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        if not _launched(facts) or starts_own_workers(facts) or ctx.summaries.sites_with(Effect.SPAWNS_WORKERS):
            return  # (a script that starts its workers itself, or through a helper, has no launcher)
        for variable in RENDEZVOUS:
            for write in facts.env_writes.get(variable, []):
                if _pinned(write, facts) and not never_named(facts, write.function):
                    yield Finding(
                        write.value,
                        f"{variable} is hard-coded in a script that torchrun launches: it overrides the "
                        "launcher's rendezvous and collides with other jobs on the node (address in use or "
                        f"a hang); remove it and pass --master-port/--rdzv-endpoint to torchrun",
                    )
        for site in facts.calls:
            pinned = _pinned_by_helper(ctx, site, facts, ctx.path, top=True)
            if pinned is not None:
                variable, inside = pinned
                yield Finding(
                    site.node,
                    f"{callee_text(site.node)}() hard-codes {variable} in a script that torchrun launches: it "
                    "overrides the launcher's rendezvous and collides with other jobs on the node (address in "
                    "use or a hang); set it only where the environment does not (os.environ.setdefault)",
                    inside=(inside,),
                )


def _pinned(write: Assignment, facts: ModuleFacts) -> bool:
    """A constant written over whatever the launcher set (not a default for when it set nothing)."""
    return _constant(write.value, facts, write) and not any(_about_env(c.test, facts) for c in write.conditions)


def _pinned_by_helper(
    ctx: LintContext, site: CallSite, facts: ModuleFacts, path: Path, top: bool = False
) -> tuple[str, Inside] | None:
    """The rendezvous variable a function of another project module pins, and where: a constant of
    its own, or a parameter the call fills with one or leaves at its literal default
    (`ddp_setup(rank, world, master_port=29500)` writing `str(master_port)`)."""
    resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, site))
    bindings = constants.bind_call(site.node, resolved.facts, resolved.function, {}) if resolved is not None else {}

    def answer(inner_facts: ModuleFacts, inner_path: Path, function: str) -> tuple[str, Inside] | None:
        return next(
            (
                (variable, Inside(inner_path, write.value, f"{variable} set here"))
                for variable in RENDEZVOUS
                for write in inner_facts.env_writes.get(variable, [])
                if (write.function == function or write.function.startswith(f"{function}."))
                and not constants.dark(write.conditions, bindings)
                and (_pinned(write, inner_facts) or write.function == function and _given_constant(write, bindings, inner_facts))
            ),
            None,
        ) or next(
            (
                found
                for inner in inner_facts.calls_within(function)
                if (found := _pinned_by_helper(ctx, inner, inner_facts, inner_path)) is not None
            ),
            None,
        )

    return ask_helper(ctx, site, facts, path, ("pins the rendezvous", constants.key(bindings)), answer, None, top)


def _given_constant(write: Assignment, bindings: constants.Bindings, facts: ModuleFacts) -> bool:
    """The write's value is (`str()` of) a parameter the call binds to a constant."""
    value = write.value
    if type(value) is cst.Call and dotted(value.func) == "str" and value.args:
        value = value.args[0].value
    return type(value) is cst.Name and value.value in bindings and not any(_about_env(c.test, facts) for c in write.conditions)


def _launched(facts: ModuleFacts) -> bool:
    """A launcher starts the script: it reads the rank the launcher sets, or takes its --local_rank,
    or starts its group from the environment (`init_process_group("nccl")`: no rank, no store, the
    default `env://`) with a RANK it does not set itself. A script that ranks its processes itself
    from what the job scheduler gives (`os.environ["RANK"] = os.environ["SLURM_PROCID"]`) is
    started by that scheduler, which chooses no port."""
    if any(string_value(w.value) is None and int_value(w.value) is None for w in facts.env_writes.get("RANK", [])):
        return False
    return (
        bool(facts.env_reads & {"LOCAL_RANK", "RANK"})
        or any(local_rank_flag(site) is not None for site in facts.calls)
        or "RANK" not in facts.env_writes
        and any(_rank_from_the_environment(site) for site in facts.calls_to(INIT_PG))
    )


def _rank_from_the_environment(site: CallSite) -> bool:
    """`init_process_group(backend)` with neither a rank nor a store, initialised from `env://`."""
    init_method = arg(site.node, 1, "init_method")
    if has_star_kwargs(site.node) or init_method is not None and string_value(init_method) != "env://":
        return False
    return arg(site.node, 4, "rank") is None and arg(site.node, 5, "store") is None


def _constant(expr: cst.BaseExpression, facts: ModuleFacts, at: Assignment, depth: int = 4) -> bool:
    """A literal, `str(...)` of one, or a name every binding of which (reaching `at`) is one:
    `PORT = 29500`, `R = {"addr": "10.0.0.1"}`, then `os.environ["MASTER_PORT"] = str(PORT)`."""
    if string_value(expr) is not None or int_value(expr) is not None:
        return True
    if type(expr) is cst.Call and dotted(expr.func) == "str" and expr.args:
        return _constant(expr.args[0].value, facts, at, depth)
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute, cst.Subscript) else None
    if name is None or depth == 0:
        return False
    values = facts.reaching(name, at.function, at.order, at.blocks)
    return bool(values) and all(_constant(v.value, facts, v, depth - 1) for v in values)


def _about_env(test: cst.BaseExpression, facts) -> bool:
    """A condition that looks at the environment (`if "MASTER_PORT" not in os.environ:`)."""
    if any(facts.qualify(n) == "os.environ" or (facts.qualify(n) or "").startswith("os.environ.") for n in names_in(test)):
        return True
    return any("MASTER" in (string_value(node) or "") or "SLURM" in (string_value(node) or "") for node in _strings(test))


def _strings(node: cst.CSTNode):
    if type(node) in (cst.SimpleString, cst.ConcatenatedString):
        yield node
    for child in node.children:
        yield from _strings(child)

"""`ddplint --runtime`: plan, launch, merge, report. `run_audit(options)` returns the exit code.

0 when no check FAILs, 1 when one does, 2 when ddplint itself could not run (bad arguments,
script not found, torch missing, interrupted) with a one-line reason on stderr.

The machine checks (`ddplint.runtime.checks`):
- before torchrun starts: `checks.host.run_host_checks(options, nproc, master_port, None, None,
  gpus)` -> list[CheckResult], reported first;
- after the run: `checks.rank.rank_checks(records, log_tail)` -> list[CheckResult], over
  every rank's record (the dicts the probe's rank hooks filled are under "info", "comm",
  "binding"; `log_tail` is the end of torchrun's captured output).
A group that raises becomes a WARN line of its own (host.checks, rank.checks); the data audit
still runs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ddplint.runtime.checks.containment import (
    Containment,
    check_leftovers,
    check_sandbox,
    writes_report,
)
from ddplint.runtime.gpucount import GpuCount, count_gpus
from ddplint.runtime.options import RuntimeOptions
from ddplint.runtime.registry import (
    CHECKS,
    HOST_CHECKS,
    IO_SANDBOX,
    IO_SINGLE_WRITER,
    RANK_CHECKS,
    RUN_FAILURE,
    RUN_HANG,
)
from ddplint.runtime.sandbox import (
    Change,
    Outcome,
    Plan,
    layer_changes,
    plan_roots,
    shared_scratch,
    unavailable_reason,
)

if TYPE_CHECKING:
    from ddplint.runtime.checks.perf import SingleRun
    from ddplint.runtime.checks.restart import RestartRun
    from ddplint.runtime.gpuuse import GpuSampling
    from ddplint.runtime.launcher import LaunchResult
from ddplint.runtime.verdict import CheckResult, Status

SMOKE = Path(__file__).with_name("smoke.py")
INSTALL_HINT = "install the runtime extra: pip install 'ddplint[runtime]'"


class UsageError(Exception):
    pass


@dataclass(frozen=True)
class JobShape:
    """How the audited job was launched."""

    nproc: int  # processes per node
    world: int  # processes in all
    backend: str  # as the report names it
    on_cpu: bool  # CUDA mapped to the CPU
    port: int


@dataclass
class Jobs:
    """What the audit ran: the audited job, and what was measured or run beside it."""

    main: LaunchResult
    gpus: GpuSampling | None  # the job's GPUs sampled during the main run (None on the CPU)
    single: SingleRun | None  # --scaling: the same steps with 1 process
    restart: RestartRun | None  # --resume-args: the restart from the first checkpoint


def _progress(message: str) -> None:
    print(f"ddplint: {message}", file=sys.stderr, flush=True)


def _validate(options: RuntimeOptions) -> tuple[int, str, GpuCount, bool]:
    """(processes per node, backend to report, the GPUs counted, whether CUDA is mapped to the
    CPU) or UsageError."""
    script = options.script
    assert script is not None
    if not script.exists():
        raise UsageError(f"script not found: {script}")
    if not script.is_file():
        raise UsageError(f"not a file: {script}")
    for module in ("torch", "numpy"):
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"{module} is not installed; {INSTALL_HINT}")
    if options.backend not in ("auto", "gloo", "nccl"):
        raise UsageError(f"unknown backend {options.backend!r}: use auto, gloo or nccl")
    for name, value in (("--steps", options.steps), ("--epochs", options.epochs)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1")
    if options.timeout <= 0 or options.rdzv_timeout <= 0:
        raise UsageError("--timeout and --rdzv-timeout must be positive")
    gpus = count_gpus(dict(os.environ))
    nproc = options.nproc_per_node or gpus.count or 2
    if nproc < 1:
        raise UsageError("--nproc-per-node must be at least 1")
    if options.backend == "nccl" and not gpus.count:
        why = f"none can be used: {gpus.broken}" if gpus.broken else "none is visible; use --backend gloo"
        raise UsageError(f"--backend nccl needs GPUs and {why}")
    on_cpu = options.device == "cpu" or (options.device == "auto" and not gpus.count)
    if on_cpu and options.backend == "nccl":
        raise UsageError("--device cpu runs the ranks on the CPU, with gloo: drop --backend nccl")
    if options.mapped_gpus is not None and not on_cpu:
        raise UsageError("--mapped-gpus needs CUDA mapped to the CPU (--device cpu, or no GPU visible)")
    backend = options.backend if options.backend != "auto" else ("nccl" if gpus.count and not on_cpu else "gloo")
    return nproc, backend, gpus, on_cpu


def _master_port(options: RuntimeOptions) -> int:
    from ddplint.runtime.checks.ports import bind_error, free_port, port_check

    if options.master_port is None:
        return free_port()
    local = options.node_rank == 0 and not options.rdzv_endpoint
    if local and bind_error(options.master_port) is not None:
        taken = port_check(options.master_addr, options.master_port)
        raise UsageError(f"--master-port {options.master_port} is in use: {taken.summary}; {taken.fix}")
    return options.master_port


def _checks_of(group: str, run: Callable[..., Iterable[CheckResult]], *args) -> list[CheckResult]:
    """`run(*args)`; if it raises, one WARN line under the group's own id (HOST_CHECKS,
    RANK_CHECKS) instead: a group of checks that cannot run must not end the audit."""
    try:
        return list(run(*args))
    except Exception as exc:  # noqa: BLE001 - a check that cannot run becomes a WARN line, the audit goes on
        what = CHECKS[group].phase
        return [CheckResult(group, Status.WARN, f"the {what} checks could not run: {type(exc).__name__}: {exc}")]


def run_audit(options: RuntimeOptions) -> int:
    from ddplint.runtime.nodes import LayoutError, Nodes, resolve_layout

    try:
        preflight = options.script is None  # the machine checks only, on ddplint's own job
        if preflight:
            options = replace(options, script=SMOKE, script_args=())
        options = resolve_layout(options, dict(os.environ))  # --nnodes etc. or SLURM's
        nproc, backend, gpus, on_cpu = _validate(options)
        port = _master_port(options)
    except (UsageError, LayoutError) as exc:
        print(f"ddplint: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before anything was started: nothing to stop
        print("ddplint: error: interrupted", file=sys.stderr)
        return 2
    from ddplint.runtime.checks.host import run_host_checks
    from ddplint.runtime.gpuuse import sampled_gpus
    from ddplint.runtime.launcher import (
        Interrupted,
        InterruptGuard,
        Launch,
        signals_deferred,
        torchrun_command,
    )
    from ddplint.runtime.rundir import RunDir, stale_run_dirs
    from ddplint.runtime.sandbox import remove_tree

    assert options.script is not None  # (the preflight's SMOKE stands in for a missing script)
    script = options.script.resolve()
    world = nproc * options.nnodes
    started = time.monotonic()
    rundir = None
    with InterruptGuard():
        try:
            for stale in stale_run_dirs(tempfile.gettempdir()):
                remove_tree(stale)
            rundir = RunDir.create()
            containment = _containment(options, script)
            plan = Plan(containment.roots, rundir.path) if containment.sandboxed else None
            host = _checks_of(HOST_CHECKS, run_host_checks, options, nproc, port, None, None, gpus)
            _write_config(rundir, options, on_cpu, plan)
            command = torchrun_command(
                rundir,
                script,
                options.script_args,
                nproc,
                options.nnodes,
                options.node_rank,
                options.master_addr,
                port,
                options.rdzv_backend,
                options.rdzv_endpoint,
            )
            counted = f" (GPUs counted by {gpus.source})" if gpus.count and gpus.source != "NVML" else ""
            mapped = ", CUDA mapped to the CPU" if on_cpu else ""
            _progress(
                f"launching torchrun: {nproc} processes x {options.nnodes} node(s), {backend}{counted}{mapped}, "
                f"port {port}, timeout {options.timeout:g} s" + (", sandboxed" if plan else f", not sandboxed (see {IO_SANDBOX})")
            )
            local_ranks = range(options.node_rank * nproc, (options.node_rank + 1) * nproc)
            with sampled_gpus(local_ranks, dict(os.environ)) if not (on_cpu or preflight) else nullcontext() as gpu_use:
                result = Launch(
                    rundir,
                    command,
                    nproc,
                    options.timeout,
                    options.rdzv_timeout,
                    _progress,
                    Nodes.of(options, port),
                    plan,
                    first_rank=options.node_rank * nproc,
                    verbose=options.verbose,
                ).run()
            changes = _changes(plan, result.sandbox)
            single = (
                _single_process_run(options, script, nproc, on_cpu, containment) if options.scaling and not preflight else None
            )
            restart = (
                _restart_run(options, script, nproc, on_cpu, rundir, plan, result.records)
                if options.resume_args is not None and not preflight
                else None
            )
            report = _merge(
                options,
                script,
                host,
                JobShape(nproc, world, backend, on_cpu, port),
                Jobs(result, gpu_use, single, restart),
                time.monotonic() - started,
                containment,
                changes,
                preflight,
            )
        except Interrupted as exc:
            print(f"ddplint: error: interrupted ({exc}); every process of the job was stopped", file=sys.stderr)
            return 2
        finally:
            if rundir is not None:
                with signals_deferred():
                    remove_tree(rundir.path)
                    rundir.unlock()
    return _emit(options, report)


def _write_config(rundir, options: RuntimeOptions, on_cpu: bool, plan: Plan | None, restarted: bool = False) -> None:
    """The audit's settings for the ranks' probes; `restarted`: this job is the --resume-args restart."""
    rundir.write_config(
        {
            "steps": options.steps,
            "epochs": options.epochs,
            "backend": "gloo" if on_cpu else options.backend,
            "cuda_on_cpu": on_cpu,
            "mapped_gpus": options.mapped_gpus,
            "timeout": options.timeout,
            "sandbox": plan is not None,
            "keep_checkpoints": options.resume_args is not None,  # the first version of each, for the restart
            "step_weights": options.resume_args is not None or restarted,  # what the restart is compared by
        }
    )


def _single_process_run(options: RuntimeOptions, script, nproc: int, on_cpu: bool, containment: Containment) -> SingleRun:
    """--scaling: the same steps with one process, in a run directory (and sandbox) of its own."""
    from ddplint.runtime.checks.perf import SingleRun
    from ddplint.runtime.launcher import signals_deferred
    from ddplint.runtime.rundir import RunDir
    from ddplint.runtime.sandbox import remove_tree

    if options.nnodes > 1:
        return SingleRun({}, skipped="several nodes: --scaling compares process counts on one node")
    if nproc == 1:
        return SingleRun({}, skipped="the audit ran 1 process: nothing to compare it with")
    alone = replace(options, nproc_per_node=1, resume_args=None)
    rundir = RunDir.create()
    try:
        plan = Plan(containment.roots, rundir.path) if containment.sandboxed else None
        what = "scaling: the same steps with 1 process"
        result = _launch_local(alone, script, options.script_args, 1, on_cpu, rundir, plan, what)
    finally:
        with signals_deferred():
            remove_tree(rundir.path)
            rundir.unlock()
    failed = None if result.records else "no rank reported (the script failed or hung with 1 process)"
    return SingleRun(result.records, failed=failed)


def _launch_local(
    options: RuntimeOptions, script, args, nproc: int, on_cpu: bool, rundir, plan: Plan | None, what: str, restarted: bool = False
):
    """A further job of this audit on this node alone (--scaling, --resume-args): torchrun with
    `args` on a free local port, in `rundir`, under `plan`'s layers."""
    from ddplint.runtime.checks.ports import free_port
    from ddplint.runtime.launcher import Launch, torchrun_command
    from ddplint.runtime.nodes import Nodes

    local = replace(options, master_addr="127.0.0.1", rdzv_backend=None, rdzv_endpoint=None)
    port = free_port()
    _write_config(rundir, local, on_cpu, plan, restarted)
    command = torchrun_command(rundir, script, args, nproc, 1, 0, "127.0.0.1", port, None, None)
    _progress(f"{what}, port {port}")
    return Launch(
        rundir,
        command,
        nproc,
        options.timeout,
        options.rdzv_timeout,
        _progress,
        Nodes.of(local, port),
        plan,
        verbose=options.verbose,
    ).run()


def _restart_run(options: RuntimeOptions, script, nproc: int, on_cpu: bool, rundir, plan: Plan | None, records) -> RestartRun:
    """--resume-args: the script started again with those arguments, in the audited run's own
    layers, where every checkpoint it saved is put back to its first version: as if the job had
    been interrupted right after its first checkpoint. One truncated epoch is enough."""
    from ddplint.runtime.checks.restart import RestartRun, failure_of, first_versions
    from ddplint.runtime.sandbox import put_back

    args = tuple(options.resume_args or ())
    if options.nnodes > 1:
        return RestartRun(args, skipped="several nodes: --resume-args restarts the job on one node only")
    if plan is None:
        return RestartRun(args, skipped="the job ran without the sandbox: a restart needs the run's own files")
    kept = first_versions(records)
    if not kept:
        return RestartRun(args, skipped="the script saved no checkpoint to a file with torch.save: nothing to restart from")
    restored = tuple(path for path, copy in kept.items() if put_back(plan.layers, path, copy))
    rundir.clear_ranks()
    again = replace(options, epochs=1, resume_args=None)
    what = "restart: the script again with --resume-args"
    result = _launch_local(again, script, args, nproc, on_cpu, rundir, plan, what, restarted=True)
    return RestartRun(args, result.records, restored, failed=failure_of(result.records, nproc))


def _changes(plan: Plan | None, sandbox: Outcome | None) -> list[Change] | None:
    """Every path the job created, modified or deleted (None without the sandbox)."""
    if plan is None:
        return None
    made = sandbox.memory_changes if sandbox is not None else []
    return sorted(layer_changes(plan.layers, tempfile.gettempdir()) + made, key=lambda c: c.path)


def _containment(options: RuntimeOptions, script) -> Containment:
    """Sandbox the job when the kernel allows it."""
    if not options.sandbox:
        return Containment(disabled=True)
    why = unavailable_reason()
    if why is not None:
        return Containment(unavailable=why)
    roots = plan_roots(
        script, options.script_args, os.getcwd(), os.environ.get("HOME"), tempfile.gettempdir(), shared_scratch(dict(os.environ))
    )
    return Containment(roots=tuple(roots))


def _contained_by(containment: Containment, sandbox: Outcome) -> Containment:
    """What the sandbox reported of the job's file system."""
    return replace(
        containment,
        covered=tuple(sandbox.covered),
        in_memory=tuple(sandbox.in_memory),
        read_only=tuple(sandbox.read_only),
        uncontained=tuple(sandbox.uncontained),
        reported=True,
    )


def _merge(options, script, host, shape: JobShape, jobs: Jobs, elapsed, containment, changes, preflight) -> dict:
    from ddplint.runtime import report as rpt
    from ddplint.runtime.checks.data import DATA_CHECKS, data_checks, loaders_of
    from ddplint.runtime.checks.perf import PERF_CHECKS, check_resume, check_scaling, check_steps
    from ddplint.runtime.checks.rank import rank_checks
    from ddplint.runtime.checks.restart import check_restart
    from ddplint.runtime.checks.run import check_failure, check_hang, check_reached
    from ddplint.runtime.checks.writers import check_single_writer

    base = os.getcwd()
    result = jobs.main
    records = result.records
    # the processes the data, write and step checks follow: torchrun's, or the workers rank 0's
    # script started itself (mp.spawn), which trained in its place
    job = {rank: w for rank, w in result.workers.items() if w.init_called}  # workers that formed a group
    audited = job or records
    world = max((r.world_size for r in audited.values()), default=1) if job else shape.world
    checks = list(host)
    checks += _checks_of(
        RANK_CHECKS, rank_checks, [records[r] for r in sorted(records)], result.log_tail, [audited[r] for r in sorted(audited)]
    )  # a failed all_reduce quotes NCCL's last line
    if preflight:
        pass  # no training script: the machine checks, communication, failure and hang only
    elif records:
        checks += data_checks(audited, world, str(script.parent), options.steps)
        checks.append(check_single_writer(audited, base, containment.sandboxed))
        checks += [
            check_resume(audited, base),
            check_restart(records, jobs.restart, base),
            check_steps(audited, base, jobs.gpus),
            check_scaling(audited, jobs.single, shape.nproc, shape.on_cpu),
        ]
    else:
        why = f"no rank reported (see {RUN_FAILURE} and {RUN_HANG})"
        checks += [CheckResult(name, Status.SKIP, why) for name in (*DATA_CHECKS, IO_SINGLE_WRITER, *PERF_CHECKS)]
    failure = _with_output(check_failure(result, shape.world, base), result.outputs)
    hang = check_hang(result, shape.world, base, options.timeout)
    if not preflight:
        own_workers = sum(record.own_workers for record in records.values())
        checks.insert(0, check_reached(loaders_of(audited), failure, hang, options.allow_no_data, own_workers, len(job)))
    checks += [failure, hang]
    writes = writes_report(changes, records, result.workers)
    if result.sandbox is not None:
        containment = _contained_by(containment, result.sandbox)
    if not preflight:
        checks.append(check_sandbox(containment, writes, base))
        checks.append(check_leftovers(result.sandbox, records))
    launch = {
        "nnodes": options.nnodes,
        "node_rank": options.node_rank,
        "nproc_per_node": shape.nproc,
        "world_size": shape.world,
        "backend": shape.backend,
        "master_addr": options.master_addr,
        "master_port": shape.port,
        "steps": options.steps,
        "epochs": options.epochs,
        "timeout_s": options.timeout,
        "rdzv_timeout_s": options.rdzv_timeout,
        "command": result.command,
        "cuda_on_cpu": shape.on_cpu,
    }
    ranks = []
    for rank in range(shape.world):
        rec = records.get(rank)
        phase = result.phases.get(rank, {})
        ranks.append(
            {
                "rank": rank,
                "status": rec.status if rec else ("hung" if result.hang else "missing"),
                "phase": phase.get("phase"),
                "backend": rec.backend.used if rec and rec.backend else None,
                "elapsed_s": rec.elapsed_s if rec else None,
                **_output_fields(result.outputs.get(rank)),
            }
        )
    loaders = [] if preflight else [loader.summary() for loader in loaders_of(audited)]  # (ddplint's own)
    return rpt.build(
        checks,
        script=None if preflight else str(script),
        script_args=options.script_args,
        launch=launch,
        elapsed_s=elapsed,
        ranks=ranks,
        loaders=loaders,
        writes=writes,
    )


OUTPUT_LINES = 10  # of each failing rank's output, in the text report


def _with_output(check: CheckResult, outputs: dict) -> CheckResult:
    """A failed run: the last lines each failing rank wrote (every line is in the JSON report)."""
    if check.status is not Status.FAIL:
        return check
    failing = [*check.data.get("missing_ranks", []), *(r["rank"] for r in check.data.get("ranks", []))]
    for rank in failing or sorted(outputs):
        out = outputs.get(rank)
        lines = out.last_lines(OUTPUT_LINES) if out else []
        if lines:
            check.evidence.append(f"rank {rank}'s last output:")
            check.evidence += [f"  | {line}" for line in lines]
    return check


def _output_fields(out) -> dict:
    if out is None:
        return {"stdout": "", "stderr": "", "output_truncated": False}
    return {"stdout": out.stdout, "stderr": out.stderr, "output_truncated": out.truncated}


def _emit(options: RuntimeOptions, report: dict) -> int:
    from ddplint.runtime import report as rpt

    text = rpt.to_json(report) if options.output_format == "json" else rpt.to_text(report, options.quiet)
    if options.output is None:
        sys.stdout.write(text)
    else:
        try:
            options.output.write_text(text, encoding="utf-8")
        except OSError as exc:
            print(f"ddplint: error: cannot write {options.output}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return report["exit_code"]

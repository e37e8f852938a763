"""Main-process guard recognition: the test forms, project predicates and declared names."""

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import run_cli

from ddplint import config as config_mod
from ddplint.lint import facts as facts_mod
from ddplint.lint import project as project_mod
from ddplint.lint.context import LintContext
from ddplint.lint.engine import lint_text
from ddplint.lint.project import ProjectIndex
from ddplint.lint.rules import ALL_RULES, KNOWN_RULES

PRELUDE = """\
import os
import sys
import torch
import torch.distributed as dist
import utils
from accelerate_like import accelerator, trainer
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
RANK = int(os.environ["RANK"])
ngpus_per_node = torch.cuda.device_count()
"""

MAIN = [
    "rank == 0",
    "0 == rank",
    "dist.get_rank() == 0",
    "args.rank % ngpus_per_node == 0",
    "local_rank in [-1, 0]",
    "RANK in {-1, 0}",
    "not rank",
    "rank <= 0",
    "is_master",
    "master_process",
    "args.local_rank == 0",
    'int(os.environ.get("RANK", 0)) == 0',
    "is_main_process()",
    "utils.is_main_process()",
    "misc.is_main_process()",
    "accelerator.is_main_process",
    "accelerator.is_local_main_process",
    "trainer.is_global_zero",
    "self.global_rank == 0",
    "epoch % 10 == 0 and rank == 0",
    "not args.distributed or rank == 0",
    "not (rank != 0)",
    "rank == 1",
    "rank == world_size - 1",
    "dist.get_rank() == dist.get_world_size() - 1",
]
NOTMAIN = ["rank != 0", "rank > 0", "local_rank not in (-1, 0)", "not is_main_process()", "rank", "rank != world_size - 1"]
SINGLE = ["not args.distributed", "not dist.is_initialized()", "world_size == 1", "args.local_rank == -1"]
NEITHER = ["args.gpu is None", "epoch % 10 == 0", "rank == 0 or epoch == 0", "args.output_dir", "rank == step"]


def context(source: str, tmp_path: Path, config: config_mod.Config | None = None) -> LintContext:
    path = tmp_path / "train.py"
    path.write_text(source)
    module = cst.parse_module(source)
    config = config or config_mod.Config(root=tmp_path, rules=KNOWN_RULES)
    return LintContext(path, module, facts_mod.collect(module), ProjectIndex(), config)


def kind(test: str, tmp_path: Path) -> str | None:
    ctx = context(PRELUDE + f"if {test}:\n    torch.save({{}}, 'x.pt')\n", tmp_path)
    site = ctx.facts.calls_to("torch.save")[0]
    return ctx.guards.condition_kind(site.conditions[-1], ctx.facts, ctx.path, site.function)


@pytest.mark.parametrize("test", MAIN)
def test_main_process_tests(test, tmp_path):
    assert kind(test, tmp_path) == "main"


@pytest.mark.parametrize("test", NOTMAIN)
def test_negated_tests(test, tmp_path):
    assert kind(test, tmp_path) == "notmain"


@pytest.mark.parametrize("test", SINGLE)
def test_non_distributed_tests(test, tmp_path):
    assert kind(test, tmp_path) == "single"


@pytest.mark.parametrize("test", NEITHER)
def test_tests_that_say_nothing_about_the_rank(test, tmp_path):
    assert kind(test, tmp_path) is None


@pytest.mark.parametrize(
    "body",
    [
        "if rank != 0:\n    sys.exit(0)\ntorch.save({}, 'x.pt')\n",
        "def f():\n    if not utils.is_main_process():\n        return\n    torch.save({}, 'x.pt')\nf()\n",
        "for step in range(3):\n    if rank:\n        continue\n    torch.save({}, 'x.pt')\n",
        "if rank != 0:\n    pass\nelse:\n    torch.save({}, 'x.pt')\n",
        "w = torch.save({}, 'x.pt') if rank == 0 else None\n",
        "@rank_zero_only\ndef f():\n    torch.save({}, 'x.pt')\nf()\n",
        "def f():\n    torch.save({}, 'x.pt')\nif rank == 0:\n    f()\n",
        "def f():\n    if args.distributed and dist.get_rank() != 0:\n        return\n    torch.save({}, 'x.pt')\nf()\n",
        "writer = None\nif rank == 0:\n    writer = open('log', 'a')\nif writer is not None:\n    torch.save({}, 'x.pt')\n",
    ],
)
def test_statements_behind_a_guard_are_main_only(body, tmp_path):
    ctx = context(PRELUDE + body, tmp_path)
    site = ctx.facts.calls_to("torch.save")[0]
    assert ctx.guards.main_only(site)


@pytest.mark.parametrize(
    "body",
    [
        # returns early off the main rank only when not sharded: every rank may pass
        "def f():\n    if not args.sharded and not utils.is_main_process():\n        return\n    torch.save({}, 'x.pt')\nf()\n",
        # a flag set to False in a single-process branch is not a handle that exists on rank 0 only
        "if args.fsdp and not args.distributed:\n    args.fsdp = False\nif args.fsdp:\n    torch.save({}, 'x.pt')\n",
    ],
)
def test_partial_guards_are_not_main_only(body, tmp_path):
    ctx = context(PRELUDE + body, tmp_path)
    assert not ctx.guards.main_only(ctx.facts.calls_to("torch.save")[0])


def test_a_function_with_one_unguarded_caller_is_not_main_only(tmp_path):
    ctx = context(PRELUDE + "def f():\n    torch.save({}, 'x.pt')\nif rank == 0:\n    f()\nf()\n", tmp_path)
    assert not ctx.guards.main_only(ctx.facts.calls_to("torch.save")[0])


def test_a_spawn_target_runs_on_every_rank(tmp_path):
    source = (
        PRELUDE + "import torch.multiprocessing as mp\ndef worker(i):\n    torch.save({}, 'x.pt')\nmp.spawn(worker, nprocs=2)\n"
    )
    ctx = context(source, tmp_path)
    assert not ctx.guards.main_only(ctx.facts.calls_to("torch.save")[0])


def test_project_predicates_resolve_across_modules(tmp_path):
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "ranks.py").write_text(
        "import os\n\ndef who():\n    return int(os.environ['RANK'])\n\n"
        "def leads():\n    return who() == 0\n\ndef trails():\n    return not leads()\n"
    )
    source = (
        "import torch\nfrom helpers.ranks import leads, trails\n"
        "if leads():\n    torch.save({}, 'a')\nif trails():\n    torch.save({}, 'b')\n"
    )
    ctx = context(source, tmp_path)
    first, second = ctx.facts.calls_to("torch.save")
    assert ctx.guards.condition_kind(first.conditions[0], ctx.facts, ctx.path, "") == "main"
    assert ctx.guards.condition_kind(second.conditions[0], ctx.facts, ctx.path, "") == "notmain"


def test_helper_modules_are_parsed_once_per_run(tmp_path, monkeypatch):
    (tmp_path / "utils.py").write_text(
        "import torch.distributed as dist\n\ndef is_main_process():\n    return dist.get_rank() == 0\n"
    )
    script = (
        "import torch\nimport torch.distributed as dist\nimport utils\ndist.init_process_group('gloo')\n"
        "if utils.is_main_process():\n    torch.save({}, 'x')\ndist.destroy_process_group()\n"
    )
    read = []
    real = project_mod.read_source
    monkeypatch.setattr(project_mod, "read_source", lambda path: read.append(path.name) or real(path))
    config = config_mod.Config(root=tmp_path, rules=KNOWN_RULES)
    rules = [rule() for rule in ALL_RULES]
    index = ProjectIndex()
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(script)
        assert lint_text(tmp_path / name, script, config, rules, index).diagnostics == []
    assert read == ["utils.py"]


DECLARED = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist
    from cluster import node_zero, only_leader, persist

    dist.init_process_group("gloo")
    if node_zero():
        torch.save({}, "a.pt")

    @only_leader
    def export():
        torch.save({}, "b.pt")

    export()
    persist({}, "c.pt")
    dist.destroy_process_group()
    """
)


def test_declared_predicates_and_helpers_from_pyproject(tmp_path):
    (tmp_path / "train.py").write_text(DECLARED)
    (tmp_path / "cluster.py").write_text("import torch\n\ndef persist(obj, path):\n    torch.save(obj, path)\n")
    before = run_cli("train.py", "--select", "DDP301", cwd=tmp_path)
    assert [line.split(":")[1] for line in before.stdout.splitlines() if "DDP301" in line] == ["7", "11", "14"]
    (tmp_path / "pyproject.toml").write_text(
        "[tool.ddplint]\n"
        'extend-main-process-predicates = ["node_zero"]\n'
        'extend-main-process-helpers = ["cluster.only_leader", "persist"]\n'
    )
    after = run_cli("train.py", "--select", "DDP301", cwd=tmp_path)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "DDP301" not in after.stdout


def test_a_call_in_another_calls_receiver_or_arguments_runs_before_it_but_not_from_a_lambda():
    from ddplint.lint.paths import dominates

    facts = facts_mod.collect(cst.parse_module("Trainer(cfg).fit(prepare())\nrun(lambda: build())\n"))
    by_name = {site.name: site for site in facts.calls}
    fit = facts.calls[0]  # `Trainer(cfg).fit` has no dotted name; it is numbered before its receiver
    assert fit.order < by_name["Trainer"].order
    assert dominates(by_name["Trainer"], fit) and dominates(by_name["prepare"], fit)
    assert not dominates(by_name["build"], by_name["run"])  # the lambda runs when run() calls it, if ever

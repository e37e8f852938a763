"""`--fix` and `--diff`: the safe fixes of DDP203 and DDP304, applied to real files."""

from __future__ import annotations

import json
import shutil
import textwrap

import libcst as cst
import pytest
from conftest import FIXTURES, run_cli

from ddplint import config as config_mod
from ddplint.diagnostics import Severity
from ddplint.lint import fixes as fixes_mod
from ddplint.lint.engine import lint_paths
from ddplint.lint.rules import KNOWN_RULES
from ddplint.lint.rules.base import Finding, Remedy, Replace, Rule

SCRIPT = textwrap.dedent(
    """\
    import os
    from pathlib import Path

    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    os.makedirs("out")
    os.makedirs("out2", 0o755, False)
    Path("ckpt").mkdir(
        parents=True,
    )
    Path("logs").mkdir(exist_ok=False)
    os.mkdir("tmp")
    os.makedirs("kept")  # noqa: DDP304
    ds = list(range(10))
    loader = DataLoader(ds, batch_size=2, shuffle=True, sampler=DistributedSampler(ds))
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            pass
    dist.destroy_process_group()
    """
)

FIXED = (
    SCRIPT.replace('os.makedirs("out")', 'os.makedirs("out", exist_ok=True)')
    .replace("0o755, False", "0o755, True")
    .replace("    parents=True,\n", "    parents=True,\n    exist_ok=True,\n")
    .replace("mkdir(exist_ok=False)", "mkdir(exist_ok=True)")
    .replace("shuffle=True, sampler", "shuffle=False, sampler")
)


def config_for(root):
    return config_mod.Config(root=root, rules=KNOWN_RULES)


def test_fix_rewrites_in_place_and_reports_what_is_left(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = run_cli("--fix", "train.py", cwd=tmp_path)
    assert script.read_text() == FIXED
    assert "Fixed 5 problems in 1 file." in proc.stderr
    # os.mkdir has no exist_ok: reported, not fixed; the noqa line is left alone
    assert proc.returncode == 1
    assert [line.split(": ")[1].split()[0] for line in proc.stdout.splitlines() if ": DDP" in line] == ["DDP304"]
    assert "train.py:15:1: DDP304 os.mkdir() runs on every rank" in proc.stdout  # one line added above
    # idempotent: a second run changes nothing
    again = run_cli("--fix", "train.py", cwd=tmp_path)
    assert script.read_text() == FIXED and "Fixed" not in again.stderr


def test_diff_prints_the_change_and_writes_nothing(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = run_cli("--diff", "train.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert script.read_text() == SCRIPT
    assert '-os.makedirs("out")\n' in proc.stdout and '+os.makedirs("out", exist_ok=True)\n' in proc.stdout
    assert "+    exist_ok=True,\n" in proc.stdout
    assert "Would fix 5 problems in 1 file." in proc.stderr
    script.write_text(FIXED)
    clean = run_cli("--diff", "train.py", cwd=tmp_path)
    assert (clean.returncode, clean.stdout) == (0, "")


def test_fix_keeps_encoding_bom_and_line_endings(tmp_path):
    latin = tmp_path / "latin.py"
    source = "# -*- coding: latin-1 -*-\r\n" + SCRIPT.replace("\n", "\r\n").replace('"out"', '"sortie_é"')
    latin.write_bytes(source.encode("latin-1"))
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + SCRIPT.encode())
    run_cli("--fix", "latin.py", "bom.py", cwd=tmp_path)
    expected = "# -*- coding: latin-1 -*-\r\n" + FIXED.replace("\n", "\r\n").replace('"out"', '"sortie_é"')
    assert latin.read_bytes() == expected.encode("latin-1")
    assert bom.read_bytes() == b"\xef\xbb\xbf" + FIXED.encode()


def test_a_failed_write_leaves_the_file_whole_and_no_temporary_file(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fixes_mod.os, "replace", refuse)
    report = fixes_mod.fix_paths([script], config_for(tmp_path), write=True)
    assert script.read_text() == SCRIPT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]
    assert [e.message for e in report.errors] == ["cannot write the fix: No space left on device"]


def test_a_fix_that_would_not_parse_is_left_out_and_the_others_are_applied(tmp_path, monkeypatch):
    class BrokenFix(Rule):
        code, name = "DDP304", "makedirs-race"
        severity = Severity.ERROR  # every rule states its level

        def check(self, ctx):
            for site in ctx.facts.calls_to("os.makedirs"):
                first = cst.ensure_type(site.node.args[0].value, cst.SimpleString).value
                replacement = cst.Name("if") if first == '"out"' else cst.parse_expression(f"os.makedirs({first})")
                if site.node.args[1:] or first == '"out"':
                    yield Finding(site.node, "m", Remedy("x", Replace(site.node, replacement)))

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    monkeypatch.setattr(fixes_mod, "enabled_rules", lambda config: [BrokenFix()])
    report = fixes_mod.fix_paths([script], config_for(tmp_path), write=True)
    assert script.read_text() == SCRIPT.replace('os.makedirs("out2", 0o755, False)', 'os.makedirs("out2")')
    assert report.fixed == 1
    assert [e.message for e in report.errors] == ["internal error: the fix for DDP304 (line 8) would not parse; left unapplied"]


def test_fix_on_unreadable_input_reports_and_exits_2(tmp_path):
    (tmp_path / "bad.py").write_bytes(b"import torch\nx = '\xff'\n")
    proc = run_cli("--fix", "bad.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "bad.py: not valid utf-8" in proc.stderr


@pytest.mark.parametrize(
    ("unsafe", "codes"),
    [
        (False, {"DDP202", "DDP203", "DDP304"}),
        (True, {"DDP101", "DDP202", "DDP203", "DDP303", "DDP304"}),
    ],
)
def test_every_fix_offered_on_the_fixtures_applies_cleanly(tmp_path, unsafe, codes):
    """Over the whole fixture corpus: each fixed file parses, the fixed findings are gone,
    nothing else changes, and a second pass has nothing left to fix."""
    tree = tmp_path / "lint"
    shutil.copytree(FIXTURES / "lint", tree)
    config = config_for(tmp_path)
    before = lint_paths([tree], config)
    fixable = [d for d in before.diagnostics if d.fix is not None and (d.fix.safe or unsafe)]
    assert {d.code for d in fixable} == codes
    report = fixes_mod.fix_paths([tree], config, write=True, unsafe=unsafe)
    assert report.errors == [] and report.fixed == len(fixable)
    for changed in report.files:
        cst.parse_module(changed.path.read_text())
    after = lint_paths([tree], config)
    assert [d for d in after.diagnostics if d.fix is not None and (d.fix.safe or unsafe)] == []
    untouched = {(d.path, d.code, d.message) for d in before.diagnostics if d not in fixable}
    assert {(d.path, d.code, d.message) for d in after.diagnostics} == untouched
    assert fixes_mod.fix_paths([tree], config, write=True, unsafe=unsafe).files == []


def test_sarif_and_json_carry_the_fix(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    report = json.loads(run_cli("--format", "json", "train.py", cwd=tmp_path).stdout)
    first = report["diagnostics"][0]
    assert (first["code"], first["line"]) == ("DDP304", 8)
    assert first["fix"] == {
        "description": "pass exist_ok=True",
        "applicability": "safe",
        "edits": [
            {"start": {"line": 8, "column": 1}, "end": {"line": 8, "column": 19}, "text": 'os.makedirs("out", exist_ok=True)'}
        ],
    }
    log = json.loads(run_cli("--format", "sarif", "train.py", cwd=tmp_path).stdout)
    result = log["runs"][0]["results"][0]
    replacement = result["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert replacement["insertedContent"]["text"] == 'os.makedirs("out", exist_ok=True)'
    assert replacement["deletedRegion"] == {"startLine": 8, "startColumn": 1, "endLine": 8, "endColumn": 19}


@pytest.mark.parametrize("flag", ["--fix", "--diff"])
def test_fix_flags_are_documented(flag):
    assert flag in run_cli("--help").stdout


HEAD = textwrap.dedent("""\
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    ds = list(range(8))
    """)
END = "dist.destroy_process_group()\n"


def fixed_body(tmp_path, body: str, unsafe: bool = False) -> str | None:
    """The script's body after --fix (None when nothing was fixed)."""
    path = tmp_path / "train.py"
    path.write_text(HEAD + textwrap.dedent(body) + END)
    report = fixes_mod.fix_paths([path], config_for(tmp_path), write=False, unsafe=unsafe)
    assert report.errors == []
    return report.files[0].after[len(HEAD) : -len(END)] if report.files else None


SET_EPOCH_FIXES = {
    "named sampler": (
        """\
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for epoch in range(3):
            for batch in loader:
                pass
        """,
        """\
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for batch in loader:
                pass
        """,
    ),
    "sampler that may be None, comment stays with its statement": (
        """\
        sampler = DistributedSampler(ds) if dist.is_initialized() else None
        loader = DataLoader(ds, sampler=sampler)
        for ep in range(3):
            # one pass
            for batch in loader:
                pass
        """,
        """\
        sampler = DistributedSampler(ds) if dist.is_initialized() else None
        loader = DataLoader(ds, sampler=sampler)
        for ep in range(3):
            if sampler is not None:
                sampler.set_epoch(ep)
            # one pass
            for batch in loader:
                pass
        """,
    ),
    "sampler given to a named loader, loop counted by i": (
        """\
        loader = DataLoader(ds, sampler=DistributedSampler(ds))
        for i in range(3):
            for batch in loader:
                pass
        """,
        """\
        loader = DataLoader(ds, sampler=DistributedSampler(ds))
        for i in range(3):
            loader.sampler.set_epoch(i)
            for batch in loader:
                pass
        """,
    ),
    "stages of epochs: the loop right around the loader's": (
        """\
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for stage in range(2):
            for epoch in range(3):
                for batch in loader:
                    pass
        """,
        """\
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for stage in range(2):
            for epoch in range(3):
                sampler.set_epoch(epoch)
                for batch in loader:
                    pass
        """,
    ),
    "above a decorated first statement and its comment": (
        """\
        sampler = DistributedSampler(ds)
        for epoch in range(3):
            # evaluation helper
            @torch.no_grad()
            def evaluate():
                pass
            for batch in DataLoader(ds, sampler=sampler):
                evaluate()
        """,
        """\
        sampler = DistributedSampler(ds)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            # evaluation helper
            @torch.no_grad()
            def evaluate():
                pass
            for batch in DataLoader(ds, sampler=sampler):
                evaluate()
        """,
    ),
    "tabs": (
        "def main():\n\tsampler = DistributedSampler(ds)\n\tfor epoch in range(3):\n"
        "\t\tfor b in DataLoader(ds, sampler=sampler):\n\t\t\tpass\n\n\nmain()\n",
        "def main():\n\tsampler = DistributedSampler(ds)\n\tfor epoch in range(3):\n\t\tsampler.set_epoch(epoch)\n"
        "\t\tfor b in DataLoader(ds, sampler=sampler):\n\t\t\tpass\n\n\nmain()\n",
    ),
}


@pytest.mark.parametrize("case", SET_EPOCH_FIXES)
def test_set_epoch_is_inserted_at_the_top_of_the_epoch_loop(tmp_path, case):
    body, expected = SET_EPOCH_FIXES[case]
    assert fixed_body(tmp_path, body) == textwrap.dedent(expected)


NO_SET_EPOCH_FIX = {
    "two epoch loops": """\
        sampler = DistributedSampler(ds)
        for epoch in range(1):
            pass
        for epoch in range(3):
            for batch in DataLoader(ds, sampler=sampler):
                pass
        """,
    "a while loop has no epoch name": """\
        sampler = DistributedSampler(ds)
        epoch = 0
        while epoch < 3:
            for batch in DataLoader(ds, sampler=sampler):
                pass
            epoch += 1
        """,
    "sampler bound on one path only": """\
        if dist.get_world_size() > 1:
            sampler = DistributedSampler(ds)
        for epoch in range(3):
            for batch in DataLoader(ds, sampler=sampler):
                pass
        """,
    "one-line loop body": """\
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for epoch in range(3): total = sum(1 for b in loader)
        """,
    "a step loop that does not iterate the loader": """\
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        batches = iter(loader)
        for step in range(300):
            try:
                next(batches)
            except StopIteration:
                batches = iter(loader)
        """,
    "an epoch name that is not an int": """\
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for epoch_file in sorted(os.listdir(".")):
            for batch in loader:
                pass
        """,
    "the loader is wrapped inside the loop": """\
        loader = DataLoader(ds, sampler=DistributedSampler(ds))
        for epoch in range(3):
            loader = iter(loader)
            for batch in loader:
                pass
        """,
    "the sampler is rebuilt inside the loop": """\
        sampler = DistributedSampler(ds)
        for epoch in range(3):
            for batch in DataLoader(ds, sampler=sampler):
                pass
            sampler = DistributedSampler(ds)
        """,
    "the epoch loop is in another function": """\
        def train(loader):
            for epoch in range(3):
                for batch in loader:
                    pass


        train(DataLoader(ds, sampler=DistributedSampler(ds)))
        """,
}


@pytest.mark.parametrize("case", NO_SET_EPOCH_FIX)
def test_no_set_epoch_fix_without_one_known_loop_and_sampler(tmp_path, case):
    path = tmp_path / "train.py"
    path.write_text(HEAD + textwrap.dedent(NO_SET_EPOCH_FIX[case]) + END)
    found = [d for d in lint_paths([path], config_for(tmp_path)).diagnostics if d.code == "DDP202"]
    assert found and all(d.fix is None for d in found)


def test_set_epoch_fix_keeps_crlf_line_endings(tmp_path):
    script = tmp_path / "train.py"
    source = HEAD + textwrap.dedent(SET_EPOCH_FIXES["named sampler"][0]) + END
    script.write_bytes(source.replace("\n", "\r\n").encode())
    proc = run_cli("--fix", "train.py", cwd=tmp_path)
    assert proc.returncode == 0 and "Fixed 1 problem in 1 file." in proc.stderr
    expected = HEAD + textwrap.dedent(SET_EPOCH_FIXES["named sampler"][1]) + END
    assert script.read_bytes() == expected.replace("\n", "\r\n").encode()


PARSER = (
    "import argparse\nparser = argparse.ArgumentParser()\n"
    'parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))\n'
    "args = parser.parse_args()\n"
)
LOCAL_RANK_FIXES = {
    "string, env local rank": (
        'local_rank = int(os.environ["LOCAL_RANK"])\nx = torch.zeros(1).to("cuda:0")\n',
        'local_rank = int(os.environ["LOCAL_RANK"])\nx = torch.zeros(1).to(f"cuda:{local_rank}")\n',
    ),
    "int, spawn index": (
        "def worker(i):\n    torch.cuda.set_device(0)\n\n\ntorch.multiprocessing.spawn(worker, nprocs=2)\n",
        "def worker(i):\n    torch.cuda.set_device(i)\n\n\ntorch.multiprocessing.spawn(worker, nprocs=2)\n",
    ),
    "int, a string-valued local rank": (
        'lr = os.environ["LOCAL_RANK"]\nx = torch.zeros(1).cuda(0)\n',
        'lr = os.environ["LOCAL_RANK"]\nx = torch.zeros(1).cuda(int(lr))\n',
    ),
    "torch.device in a variable": (
        'local_rank = int(os.environ["LOCAL_RANK"])\ndevice = torch.device("cuda", 0)\nx = torch.zeros(1).to(device)\n',
        'local_rank = int(os.environ["LOCAL_RANK"])\ndevice = torch.device("cuda", local_rank)\nx = torch.zeros(1).to(device)\n',
    ),
    "inside an f-string, in the literal's own quotes": (
        'local_rank = int(os.environ["LOCAL_RANK"])\nprint(f"{torch.zeros(1).to(\'cuda:0\')}")\n',
        'local_rank = int(os.environ["LOCAL_RANK"])\nprint(f"{torch.zeros(1).to(f\'cuda:{local_rank}\')}")\n',
    ),
    "comments inside the call stay": (
        'local_rank = int(os.environ["LOCAL_RANK"])\nd = torch.device(\n    "cuda",  # the GPU\n    0,  # per rank\n)\n'
        + "x = torch.zeros(1).to(d)\n",
        'local_rank = int(os.environ["LOCAL_RANK"])\nd = torch.device(\n    "cuda",  # the GPU\n    local_rank,  # per rank\n)\n'
        + "x = torch.zeros(1).to(d)\n",
    ),
    "argparse option that defaults to LOCAL_RANK": (
        PARSER + 'x = torch.zeros(1, device="cuda:0")\n',
        PARSER + 'x = torch.zeros(1, device=f"cuda:{args.local_rank}")\n',
    ),
}


@pytest.mark.parametrize("case", LOCAL_RANK_FIXES)
def test_hard_coded_gpu_0_becomes_the_local_rank_under_unsafe_fixes(tmp_path, case):
    body, expected = LOCAL_RANK_FIXES[case]
    assert fixed_body(tmp_path, body) is None
    assert fixed_body(tmp_path, body, unsafe=True) == expected


NO_LOCAL_RANK_FIX = {
    "a name, not a local rank": 'local_rank = -1\nx = torch.zeros(1).to("cuda:0")\n',
    "bound after the use": 'x = torch.zeros(1).to("cuda:0")\nlocal_rank = int(os.environ["LOCAL_RANK"])\n',
    "bound on one path only": 'if "LOCAL_RANK" in os.environ:\n    local_rank = int(os.environ["LOCAL_RANK"])\n'
    'x = torch.zeros(1).to("cuda:0")\n',
    "a second GPU": 'local_rank = int(os.environ["LOCAL_RANK"])\nx = torch.zeros(1).to("cuda:1")\n',
    "a staticmethod has no self": "class T:\n    def __init__(self):\n"
    '        self.local_rank = int(os.environ["LOCAL_RANK"])\n\n'
    '    @staticmethod\n    def place():\n        return torch.zeros(1).to("cuda:0")\n\n\nT.place()\n',
    "__init__ calls the method before setting it": "class T:\n    def __init__(self):\n        self.place()\n"
    '        self.local_rank = int(os.environ["LOCAL_RANK"])\n\n'
    '    def place(self):\n        return torch.zeros(1).to("cuda:0")\n\n\nT()\n',
    "a global bound after the call": 'def place():\n    return torch.zeros(1).to("cuda:0")\n\n\nplace()\n'
    'local_rank = int(os.environ["LOCAL_RANK"])\nplace()\n',
    "a local assigned later in the function": 'local_rank = int(os.environ["LOCAL_RANK"])\n\n\ndef place():\n'
    '    x = torch.zeros(1).to("cuda:0")\n    local_rank = 3\n    return x\n\n\n'
    "place()\n",
    "a parameter shadows the global": 'local_rank = int(os.environ["LOCAL_RANK"])\n\n\ndef place(local_rank=None):\n'
    '    return torch.zeros(1).to("cuda:0")\n\n\nplace()\n',
    "rebound later in the loop": 'local_rank = int(os.environ["LOCAL_RANK"])\nfor i in range(2):\n'
    '    x = torch.zeros(1).to("cuda:0")\n    local_rank = i\n',
    "a parameter named args that is not the command line": PARSER + "def build(args):\n"
    '    return torch.zeros(1).to("cuda:0")\n\n\nbuild(object())\n',
    "a lambda parameter of that name": 'local_rank = int(os.environ["LOCAL_RANK"])\n'
    'move = lambda t, local_rank=None: t.to("cuda:0")\n',
    "a comprehension variable of that name": 'local_rank = int(os.environ["LOCAL_RANK"])\n'
    'xs = [torch.zeros(1).to("cuda:0") for local_rank in range(2)]\n',
    "a class body": 'class Cfg:\n    local_rank = int(os.environ["LOCAL_RANK"])\n'
    '    devices = [torch.device("cuda:0") for _ in range(1)]\n',
    "option that torchrun never fills": "import argparse\nparser = argparse.ArgumentParser()\n"
    'parser.add_argument("--local_rank", type=int, default=0)\n'
    'args = parser.parse_args()\nx = torch.zeros(1, device="cuda:0")\n',
}


@pytest.mark.parametrize("case", NO_LOCAL_RANK_FIX)
def test_no_local_rank_fix_without_a_local_rank_that_reaches_the_index(tmp_path, case):
    path = tmp_path / "train.py"
    path.write_text(HEAD + NO_LOCAL_RANK_FIX[case] + END)
    found = [d for d in lint_paths([path], config_for(tmp_path)).diagnostics if d.code == "DDP101"]
    assert len(found) == 1 and found[0].fix is None


def test_no_map_location_fix_where_star_arguments_may_carry_it(tmp_path):
    body = 'model = torch.nn.Linear(1, 1)\nload_args = ("ckpt.pt",)\nmodel.load_state_dict(torch.load(*load_args))\n'
    assert fixed_body(tmp_path, body, unsafe=True) is None


def test_map_location_fix_keeps_a_multi_line_call_well_formed(tmp_path):
    body = 'model = torch.nn.Linear(1, 1)\nmodel.load_state_dict(torch.load(\n    "ckpt.pt",\n))\n'
    assert fixed_body(tmp_path, body) is None
    assert fixed_body(tmp_path, body, unsafe=True) == (
        'model = torch.nn.Linear(1, 1)\nmodel.load_state_dict(torch.load(\n    "ckpt.pt",\n    map_location="cpu",\n))\n'
    )
    commented = 'model = torch.nn.Linear(1, 1)\nmodel.load_state_dict(torch.load(\n    "ckpt.pt"  # the last one\n))\n'
    assert fixed_body(tmp_path, commented, unsafe=True) == (
        "model = torch.nn.Linear(1, 1)\nmodel.load_state_dict(torch.load(\n"
        '    "ckpt.pt",\n    map_location="cpu"  # the last one\n))\n'
    )


def test_noqa_and_fixes_count_lines_as_python_does(tmp_path):
    """A form feed is no line break for Python: `# noqa` on the line after one still applies."""
    body = 'local_rank = int(os.environ["LOCAL_RANK"])\n\x0c\nx = torch.zeros(1).to("cuda:0")  # noqa: DDP101\n'
    path = tmp_path / "train.py"
    path.write_text(HEAD + body + END)
    assert [d.code for d in lint_paths([path], config_for(tmp_path)).diagnostics] == []
    assert fixed_body(tmp_path, body, unsafe=True) is None


def test_an_edit_saved_while_fix_runs_is_kept(tmp_path, monkeypatch):
    """The fixes were computed from the old text; writing them would throw the edit away."""
    from ddplint import config as config_mod
    from ddplint.lint import fixes as fixes_mod
    from ddplint.lint.rules import KNOWN_RULES

    path = tmp_path / "train.py"
    before = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\nimport os\nos.makedirs('out')\n"
    path.write_text(before)
    edited = before + "# saved by the editor meanwhile\n"
    real = fixes_mod._fixed_text

    def edit_meanwhile(*args, **kwargs):
        fixed = real(*args, **kwargs)
        path.write_text(edited)
        return fixed

    monkeypatch.setattr(fixes_mod, "_fixed_text", edit_meanwhile)
    report = fixes_mod.fix_paths([path], config_mod.Config(root=tmp_path, rules=KNOWN_RULES), write=True)
    assert [(e.path, e.message) for e in report.errors] == [
        (str(path), "not fixed: the file changed while it was being fixed; run --fix again")
    ]
    assert report.files == [] and path.read_text() == edited
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # no temporary file left

"""The analysis parses without libcst's node validation: the same tree, valid code that the
validator refuses is linted, and every node built afterwards is validated again."""

from __future__ import annotations

import libcst as cst
import pytest
from conftest import FIXTURES, run_cli

from ddplint.lint import parsing

# Valid Python (compile() takes it) on which libcst's validator raises a TypeError.
VALIDATOR_REFUSES = "x = () if 0 else(lambda:())\n"


def test_the_tree_is_the_one_a_validated_parse_builds():
    files = sorted(FIXTURES.rglob("*.py"))
    assert len(files) > 500
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            expected = cst.parse_module(text)
        except cst.ParserSyntaxError:
            with pytest.raises(cst.ParserSyntaxError):
                parsing.parse_module(text)
            continue
        got = parsing.parse_module(text)
        assert got.deep_equals(expected), path
        assert got.code == text, path


def test_valid_code_the_validator_refuses_is_parsed_and_linted(tmp_path):
    compile(VALIDATOR_REFUSES, "<case>", "exec")
    with pytest.raises(TypeError):
        cst.parse_module(VALIDATOR_REFUSES)
    assert parsing.parse_module(VALIDATOR_REFUSES).code == VALIDATOR_REFUSES
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nimport torch.distributed as dist\n\n"
        + VALIDATOR_REFUSES
        + 'dist.init_process_group("nccl")\nmodel = torch.nn.Linear(2, 2).to("cuda:0")\n'
        "dist.destroy_process_group()\n"
    )
    done = run_cli("--no-cache", "--select", "DDP101", str(script))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "internal error" not in done.stdout + done.stderr
    assert "DDP101" in done.stdout


@pytest.mark.parametrize("text", ["x = (1\n", "import torch\n"])
def test_nodes_built_after_a_parse_are_validated_again(text):
    try:
        parsing.parse_module(text)
    except cst.ParserSyntaxError:
        pass
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")

"""Finding positions are exactly libcst's PositionProvider ranges, however they are worked out
(from the statement that holds a node, or by generating the module's code from its start)."""

from __future__ import annotations

import libcst as cst
import pytest
from conftest import FIXTURES
from libcst.metadata import MetadataWrapper, PositionProvider

from ddplint.lint import positions
from ddplint.lint.walk import Walker

# Tabs, non-ASCII text before nodes, `;`, one-line suites, elif, decorators with a comment
# between them, try/except, with, match, and brackets continued over lines.
AWKWARD = """import torch
# é comment
class A:
\tdef f(self, x="é"):
\t\tif x: y = torch.save(x,
\t\t\t"p"); z = 1
\t\telif torch.cuda.is_available(): pass
\t\telse:
\t\t\treturn [torch.load(
  "q")]
@dec(1)
# between
@dec2
async def g():
    s = "ü"; t = torch.save(s, "x")
    del s, t
    try:
        pass
    except (ValueError, torch.Tag) as e:
        raise
    async with open("a") as fh, open(f"{s}b"):
        match s:
            case "x":
                torch.save(1, 2)
"""


class _All(Walker):
    def __init__(self) -> None:
        self.nodes: list[cst.CSTNode] = []

    def walk(self, node: cst.CSTNode) -> None:
        self.nodes.append(node)
        super().walk(node)


def _every_node(module: cst.Module) -> list[cst.CSTNode]:
    walker = _All()
    walker.walk(module)
    return walker.nodes[1:]  # not the module itself


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_every_node_of_awkward_code_is_where_libcst_puts_it(newline):
    text = AWKWARD.replace("\n", newline)
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = _every_node(module)
    from_statements = positions._from_statements(module, {id(n) for n in nodes}, text)
    assert len(from_statements) > 0.9 * len(nodes)  # the statement way placed nearly all of them
    found = positions.ranges(module, nodes, text)
    assert {id(n): found.get(id(n)) for n in nodes} == {id(n): expected[n] for n in nodes}


def test_fixture_nodes_are_where_libcst_puts_them():
    checked = 0
    for path in sorted((FIXTURES / "lint").rglob("*.py"))[::7]:
        text = path.read_text()
        module = cst.parse_module(text)
        expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        nodes = _every_node(module)
        found = positions.ranges(module, nodes, text)
        assert [found.get(id(n)) for n in nodes] == [expected[n] for n in nodes], path
        checked += len(nodes)
    assert checked > 5000


def test_syntax_newer_than_python_falls_back_to_the_module_code():
    text = "import torch\nx = torch.save(1, 'p')\n"
    module = cst.parse_module(text)
    call = module.body[1].body[0].value
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)[call]
    # text Python cannot read (as with syntax newer than the running Python): nothing is placed
    # from statements, and the range still comes out right
    assert positions._from_statements(module, {id(call)}, text + "type X = (\n") == {}
    assert positions.ranges(module, [call], text + "type X = (\n")[id(call)] == expected

"""Which bindings of a name reach a use (facts.ModuleFacts.reaching), through if/else arms."""

import libcst as cst
import pytest

from ddplint.lint.facts import collect

SOURCE = """
def f(a, b, c):
    x = 0
    if a:
        x = 1
    {rest}
    use(x)
"""


def reaching_values(rest: str) -> list[str]:
    module = cst.parse_module(SOURCE.format(rest=rest.replace("\n", "\n    ")))
    facts = collect(module)
    use = next(c for c in facts.calls if c.name == "use")
    return [module.code_for_node(a.value) for a in facts.reaching("x", "f", use.order, use.blocks)]


@pytest.mark.parametrize(
    ("rest", "expected"),
    [
        ("", ["0", "1"]),  # an if without an else may or may not have run
        ("if b:\n    x = 2\nelse:\n    x = 3", ["2", "3"]),  # both arms rebind: nothing before reaches
        ("if b:\n    x = 2\nelif c:\n    x = 3\nelse:\n    x = 4", ["2", "3", "4"]),  # an elif chain too
        ("if b:\n    x = 2\nelif c:\n    x = 3", ["0", "1", "2", "3"]),  # no final else
        ("if b:\n    x = 2\nelse:\n    if c:\n        x = 3", ["0", "1", "2", "3"]),  # one arm may keep it
        ("if b:\n    x = 2\nelse:\n    for _ in c:\n        x = 3", ["0", "1", "2", "3"]),  # a loop may not run
    ],
)
def test_bindings_on_every_arm_of_an_if_else_replace_what_came_before(rest, expected):
    assert reaching_values(rest) == expected

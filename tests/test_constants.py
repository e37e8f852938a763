"""Constant arguments followed into a helper, and the branches they switch off."""

import libcst as cst
import pytest

from ddplint.lint import constants
from ddplint.lint.facts import Condition, collect

HELPER = """
def helper(path, rank=-1, *, verbose=False, mode="w"):
    if rank not in [-1, 0]:
        barrier()
    if rank == 0 and verbose:
        barrier()
    if not verbose:
        log()
    if mode in ("a", "w"):
        write()
"""


def bindings(call_source: str) -> dict:
    definition = cst.parse_module(HELPER).body[0]
    call = cst.parse_expression(call_source)
    return constants.bind_arguments(call, definition, {"caller_rank": 3})


@pytest.mark.parametrize(
    "call, expected",
    [
        ("helper('x')", {"rank": -1, "verbose": False, "mode": "w"}),
        ("helper('x', 0, verbose=True)", {"path": "x", "rank": 0, "verbose": True, "mode": "w"}),
        ("helper(p, rank=caller_rank)", {"rank": 3, "verbose": False, "mode": "w"}),
        ("helper(p, rank=get_rank(), mode=m)", {"verbose": False}),
        ("helper(*args)", {}),
    ],
)
def test_bind_arguments(call, expected):
    got = bindings(call)
    if "path" not in expected:
        got.pop("path", None)
    assert got == expected


def dark_calls(call_source: str) -> list[str]:
    facts = collect(cst.parse_module(HELPER))
    bound = bindings(call_source)
    return sorted(site.name for site in facts.calls if constants.dark(site.conditions, bound))


def test_dark_branches():
    assert dark_calls("helper('x')") == ["barrier", "barrier"]  # -1 skips the first, verbose=False the second
    assert dark_calls("helper('x', rank=5)") == ["barrier"]  # the second only
    assert dark_calls("helper('x', rank=0, verbose=True)") == ["barrier", "log"]
    assert dark_calls("helper('x', mode='r')") == ["barrier", "barrier", "write"]
    # rank unknown: the first barrier may run; `rank == 0 and verbose` is still false
    assert dark_calls("helper(p, rank=get_rank())") == ["barrier"]


FLAGS = """
args = parse()


def train(verbose):
    if args.distributed:
        sampler()
    if not verbose:
        log()
    if args.world_size > 1:
        barrier()


def main(args):
    if args.distributed:
        sampler()


if not args.distributed:
    train(args.distributed)
"""


def test_the_tests_around_a_call_decide_branches_inside_it():
    facts = collect(cst.parse_module(FLAGS))
    call = next(site for site in facts.calls if site.name == "train")
    known = constants.branch_facts(call.conditions)
    assert {name: bool(value) for name, value in known.items()} == {"args.distributed": False}
    inside = {**constants.carried(known, facts, "train"), **constants.bind_call(call.node, facts, "train", known)}
    conditions = {site.name: site.conditions for site in facts.calls if site.function == "train"}
    assert constants.dark(conditions["sampler"], inside)  # args.distributed is false in there
    assert not constants.dark(conditions["log"], inside)  # verbose got a false value: `not verbose` runs
    # a value known only by its truth decides no comparison
    assert not constants.dark(conditions["barrier"], {"args.world_size": constants.Truth(False)})
    # a function whose own parameter is called `args` does not see the caller's module-level args
    assert constants.carried(known, facts, "main") == {}


@pytest.mark.parametrize(
    ("call", "fills"),
    [
        ("f(1, 2)", True),
        ("f(1)", False),  # `b` has no default: TypeError before the body
        ("f(1, b=2)", True),
        ("f(*xs)", True),  # what *xs holds is not known
        ("obj.m()", False),  # `self` is the object; `rank` is missing
        ("obj.m(0)", True),
        ("g(1)", False),  # the keyword-only `k` is required
        ("g(1, k=2)", True),
        ("h()", True),  # decorated: the wrapper may take other arguments
        ("f(1, 2, rank=0)", False),  # a keyword f does not take: TypeError before the body
        ("k(1, rank=0)", True),  # **kwargs takes any keyword
        ("g(1, k=2, c=3)", False),
    ],
)
def test_a_call_that_cannot_bind_its_arguments_cannot_enter_the_function(call, fills):
    from ddplint.lint.names import enters

    module = cst.parse_module(
        "def f(a, b, c=3): pass\nclass C:\n    def m(self, rank, world=1): pass\ndef g(a, *, k): pass\n@wraps\ndef h(a): pass\n"
        "def k(a, **options): pass\n"
    )
    definitions = {}
    for statement in module.body:
        if type(statement) is cst.FunctionDef:
            definitions[statement.name.value] = statement
        elif type(statement) is cst.ClassDef:
            definitions["m"] = statement.body.body[0]
    node = cst.parse_expression(call)
    name = node.func.attr.value if type(node.func) is cst.Attribute else node.func.value
    assert enters(node, definitions[name]) is fills


@pytest.mark.parametrize(
    "test, dark",
    [
        ("scaler is not None", False),  # taken: a built object is not None
        ("scaler is None", True),
        ("None is scaler", True),
        ("not (scaler is None)", False),
        ("scaler is not None and rank == 0", None),  # the rank is unknown
        ("scaler", None),  # its truth is its class's (`__bool__`, `__len__`)
        ("not scaler", None),
        ("scaler == 0", None),
        ("scaler is other", None),
    ],
)
def test_a_built_object_decides_only_whether_it_is_none(test, dark):
    """`scaler = NativeScaler()` handed to a helper: the helper's `if scaler is not None:`
    is taken, its `else:` dark; nothing else about the object is known."""
    (condition,) = collect(cst.parse_module(f"if {test}:\n    f()\n")).calls[0].conditions
    bound = {"scaler": constants.BUILT}
    negated = Condition(condition.test, negated=True)
    assert constants.dark((condition,), bound) is bool(dark)
    assert constants.dark((negated,), bound) is (dark is False)


@pytest.mark.parametrize(
    "test, negated, known",
    [
        ('phase == "train"', False, {"phase": "train"}),
        ('phase == "train" and opt.mode != "val"', False, {"phase": "train"}),
        ('phase != "train"', True, {"phase": "train"}),
        ('phase != "train"', False, {}),  # only what it is not: nothing to bind
        ('phase == "train" or resume', False, {}),  # either side may hold
        ("args.ddp and not args.cpu", False, {"args.ddp": True, "args.cpu": False}),
        ('not (rank == 0 or phase == "val")', False, {}),
    ],
)
def test_the_tests_around_a_call_bind_what_they_decide(test, negated, known):
    """`if phase == "train":` binds phase for the calls under it; an `and` that holds binds both
    sides, an `or` neither; a truth test records only the truth."""
    got = constants.branch_facts((Condition(cst.parse_expression(test), negated),))
    assert {name: value if not isinstance(value, constants.Truth) else bool(value) for name, value in got.items()} == known

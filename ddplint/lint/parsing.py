"""libcst's parse of a module, without the validation of the tree its parser built.

Every libcst node checks its own fields when it is constructed (`CSTNode.__post_init__` calls
`_validate`), which is there for trees that code builds by hand. The parser's tree is valid by
construction, so for a parse the checks only cost time (about a fifth of the parse) and can
only fail where the validator is wrong about valid code: `x = () if 0 else(lambda:())` made
libcst raise a TypeError from a `_validate`. So while the parser builds the tree, the nodes
skip it; every node built afterwards (a rule's fix, a renamed test) is validated as usual.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
from libcst._nodes.base import CSTNode

_VALIDATE: Callable[[CSTNode], None] = CSTNode.__post_init__


def _unchecked(node: CSTNode) -> None:
    """A parsed node's `__post_init__`: nothing to check."""


def parse_module(text: str) -> cst.Module:
    """`cst.parse_module(text)`; raises cst.ParserSyntaxError where libcst's grammar refuses it."""
    CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign, assignment]
    try:
        return cst.parse_module(text)
    finally:
        CSTNode.__post_init__ = _VALIDATE  # type: ignore[method-assign, assignment]

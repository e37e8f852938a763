"""Record dataclasses from the plain data they were stored as.

The probe stores its records with `dataclasses.asdict` (dicts, lists, numpy arrays); `from_plain`
builds them back from the dataclasses' type hints, so a field added to a record is read back
without a converter of its own. Unknown keys are ignored and missing ones take their defaults:
a record of an older probe still reads.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def from_plain(cls: type[T], plain: Any) -> T:
    """`plain` (what `dataclasses.asdict` made of a `cls`) as a `cls` again."""
    return _value(cls, plain)


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(hint) if a is not type(None)]
        return _value(kinds[0], value) if len(kinds) == 1 else value
    if origin is list and isinstance(value, list | tuple):
        (item,) = typing.get_args(hint) or (Any,)
        return [_value(item, v) for v in value]
    if origin is dict and isinstance(value, dict):
        _, item = typing.get_args(hint) or (Any, Any)
        return {k: _value(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type) and isinstance(value, dict):
        hints = _field_hints(hint)
        given = {k: v for k, v in value.items() if k in hints and (v is not None or _optional(hints[k]))}
        return hint(**{k: _value(hints[k], v) for k, v in given.items()})
    return value


def _optional(hint: Any) -> bool:
    """None is a value of the field (else a None stored for it means its default)."""
    return hint is Any or type(None) in typing.get_args(hint)


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}

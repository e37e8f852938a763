"""sarif-om objects -> plain JSON data under the SARIF property names.

sarif-om marks "not set" with None and with -1 (indices, offsets, rank); written out, those
would claim values the tool never computed, so they are left out. String defaults (a
result's `level`, `kind`) are kept: readers look for them. An empty list is kept too:
`results: []` says "analyzed, nothing found", which an absent `results` does not.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import attr

_KEEP = object()  # a field whose default is never left out


def to_json(value: Any) -> Any:
    cls: type = type(value)
    if attr.has(cls):
        out = {}
        for name, key, unset in _fields(cls):
            item = getattr(value, name)
            if item is not None and (unset is _KEEP or item != unset):
                out[key] = to_json(item)
        return out
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items() if item is not None}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


@cache
def _fields(cls: type) -> list[tuple[str, str, Any]]:
    """(attribute, SARIF property name, the default that means "not set" or _KEEP) per field."""
    out = []
    for field in attr.fields(cls):
        default = field.default
        # attrs' stubs declare Factory as a function; at run time it is the class of factory defaults
        if isinstance(default, attr.Factory):  # type: ignore[arg-type]
            default = default.factory()
        if default is attr.NOTHING or default is None or isinstance(default, str):
            default = _KEEP
        out.append((field.name, field.metadata["schema_property_name"], default))
    return out

"""sarif-om objects -> plain JSON data under the SARIF property names.

sarif-om marks "not set" with None and with -1 (indices, offsets, rank); written out, those
would claim values the tool never computed, so they are left out. String defaults (a
result's `level`, `kind`) are kept: readers look for them. An empty list is kept too:
`results: []` says "analyzed, nothing found", which an absent `results` does not.
"""

from __future__ import annotations

from typing import Any

import attr


def to_json(value: Any) -> Any:
    if attr.has(type(value)):
        out = {}
        for field in attr.fields(type(value)):
            item = getattr(value, field.name)
            if item is None or _is_unset_default(item, field):
                continue
            out[field.metadata["schema_property_name"]] = to_json(item)
        return out
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items() if item is not None}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


def _is_unset_default(value: Any, field: attr.Attribute) -> bool:
    default = field.default
    if isinstance(default, attr.Factory):
        default = default.factory()
    if default is attr.NOTHING or isinstance(default, str):
        return False
    return value == default

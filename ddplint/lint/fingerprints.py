"""Fingerprints of findings that survive edits elsewhere in a file.

The same value is SARIF's `partialFingerprints` (code scanning matches alerts across
commits by it) and the key of a baseline entry.
"""

from __future__ import annotations

import hashlib
from collections import Counter

from ddplint.diagnostics import Diagnostic


def fingerprints(diagnostics: list[Diagnostic]) -> list[str]:
    """Per finding: hash of rule, whitespace-free source line, and which repeat of that pair in the file it is.

    No line number goes in, so inserting code above a finding keeps its fingerprint.
    """
    seen: Counter[tuple[str, str, str]] = Counter()
    out = []
    for d in diagnostics:
        key = (d.path, d.code, "".join(d.source_line.split()))
        occurrence = seen[key]
        seen[key] += 1
        digest = hashlib.sha256(f"{d.code}\0{key[2]}\0{occurrence}".encode()).hexdigest()
        out.append(digest[:32])
    return out

"""JUnit XML, which most CI systems (GitLab, Jenkins, Azure, CircleCI) show as test results.

One <testsuite> per linted file with findings, one failed <testcase> per finding (named by
rule and position), and a file that could not be linted as a <testcase> with an <error>; a
clean run is one passing <testcase>, so a reader that expects at least one test finds it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from itertools import groupby

from ddplint.config import Config
from ddplint.lint.result import LintResult
from ddplint.report.options import DEFAULTS, ReportOptions
from ddplint.report.text import position

# Characters XML 1.0 cannot carry at all (control characters, lone surrogates): replaced, so a
# message quoting odd source never makes the report unreadable.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    return NOT_XML.sub("\ufffd", text)


def render(result: LintResult, config: Config, options: ReportOptions = DEFAULTS) -> str:
    errors = [*result.errors, *result.internal_errors]
    root = ET.Element(
        "testsuites",
        name="ddplint",
        tests=str(max(len(result.diagnostics) + len(errors), 1)),
        failures=str(len(result.diagnostics)),
        errors=str(len(errors)),
    )
    for path, group in groupby(result.diagnostics, key=lambda d: d.path):
        found = list(group)
        suite = ET.SubElement(root, "testsuite", name=_clean(path), tests=str(len(found)), failures=str(len(found)), errors="0")
        for d in found:
            case = ET.SubElement(
                suite,
                "testcase",
                name=_clean(f"{d.code} at {position(d)}"),
                classname=_clean(path),
                file=_clean(path),
                line=str(d.line),
            )
            failure = ET.SubElement(case, "failure", message=_clean(d.message), type=d.code)
            failure.text = _clean(f"{position(d)}: {d.code} [{d.severity.value}] {d.message}")
    if errors:
        suite = ET.SubElement(root, "testsuite", name="ddplint", tests=str(len(errors)), failures="0", errors=str(len(errors)))
        for error in errors:
            case = ET.SubElement(
                suite, "testcase", name=_clean(f"lint {error.path}"), classname="ddplint", file=_clean(error.path)
            )
            ET.SubElement(case, "error", message=_clean(error.message)).text = _clean(error.message)
    if not result.diagnostics and not errors:
        suite = ET.SubElement(root, "testsuite", name="ddplint", tests="1", failures="0", errors="0")
        ET.SubElement(suite, "testcase", name="no findings", classname="ddplint")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

"""Jupyter notebooks: the code cells, in order, linted as one module.

A notebook runs its cells in one namespace, so a sampler built in cell 2 and an epoch loop
in cell 5 are one script. IPython-only lines (`%magic`, `!shell`, `x = !cmd`, `obj?`) become
`pass` at their indentation, and a cell that starts with a cell magic (`%%bash`) is left
out, so the rest parses as Python with every line where it was. Positions are mapped back
to (cell, line in cell).
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, replace

from ddplint.diagnostics import Diagnostic
from ddplint.lint.source import SourceError, source_lines

SUFFIX = ".ipynb"
IPYTHON_LINE = re.compile(r"^(\s*)(?:[%!?]|[\w.,\s\[\]]+=\s*[%!]|[^#\s].*\?$)")
CELL_MAGIC = re.compile(r"^\s*%%")


@dataclass(frozen=True)
class NotebookSource:
    text: str  # the code cells as one module
    cell_lines: tuple[tuple[int, int], ...]  # module line (1-based) - 1 -> (cell number, line in cell)

    def locate(self, line: int) -> tuple[int, int]:
        if 0 < line <= len(self.cell_lines):
            return self.cell_lines[line - 1]
        return self.cell_lines[-1] if self.cell_lines else (1, line)

    def map_diagnostic(self, d: Diagnostic) -> Diagnostic:
        """The diagnostic at (cell, line in cell); fixes are not offered on notebooks."""
        cell, line = self.locate(d.line)
        end_cell, end_line = self.locate(d.end_line)
        if end_cell != cell:  # a node cannot span cells; keep the end within the start's cell
            end_line, end_col = line, d.col
        else:
            end_col = d.end_col
        return replace(d, cell=cell, line=line, end_line=end_line, end_col=end_col, fix=None)


def _is_python(source: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, "<cell>", "exec", dont_inherit=True, flags=ast.PyCF_ONLY_AST)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


def _without_ipython(line: str) -> str:
    match = IPYTHON_LINE.match(line)
    return f"{match.group(1)}pass" if match else line


def is_notebook(name: str) -> bool:
    return name.endswith(SUFFIX)


def notebook_source(text: str) -> NotebookSource:
    """The code of a .ipynb file's JSON text; SourceError when it is not a notebook."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SourceError(f"not a Jupyter notebook: invalid JSON ({str(exc).splitlines()[0]})") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise SourceError("not a Jupyter notebook: no `cells` list (nbformat 4 is supported)")
    # Only a table says which language the kernel runs; any other shape says nothing.
    metadata = data.get("metadata")
    kernelspec = metadata.get("kernelspec") if isinstance(metadata, dict) else None
    language = kernelspec.get("language", "python") if isinstance(kernelspec, dict) else "python"
    if isinstance(language, str) and language.lower() not in ("python", ""):
        return NotebookSource("", ())  # an R or Julia notebook: nothing to lint
    lines: list[str] = []
    where: list[tuple[int, int]] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if not isinstance(source, str):
            continue
        cell_lines = source_lines(source)
        if cell_lines and CELL_MAGIC.match(cell_lines[0]):
            continue
        if not _is_python(source):  # `%` and `?` can also start a continuation line of Python
            cell_lines = [_without_ipython(line) for line in cell_lines]
        lines.extend(cell_lines)
        where.extend((number, index) for index in range(1, len(cell_lines) + 1))
    return NotebookSource("".join(line + "\n" for line in lines), tuple(where))

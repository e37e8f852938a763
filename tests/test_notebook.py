"""Jupyter notebooks: code cells linted as one module, positions as (cell, line), IPython lines skipped."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from ddplint.lint.notebook import notebook_source

HEAD = ["import torch\n", "import torch.distributed as dist\n"]


def notebook(*cells: tuple[str, list[str]], language: str = "python") -> str:
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": kind,
                    "metadata": {},
                    "source": source,
                    **({"execution_count": None, "outputs": []} if kind == "code" else {}),
                }
                for kind, source in cells
            ],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": language}},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )


TRAIN = notebook(
    ("markdown", ["# Training on every GPU\n"]),
    ("code", ["%matplotlib inline\n", "!pip install torch\n", *HEAD]),
    ("code", ["%%bash\n", "nvidia-smi\n"]),
    ("code", ["dist.init_process_group('nccl')\n", "files = !ls\n", "model = torch.nn.Linear(1, 1).to('cuda:0')\n", "model?\n"]),
)


def test_a_notebook_with_a_bug_is_reported_by_cell_and_line(tmp_path):
    (tmp_path / "train.ipynb").write_text(TRAIN)
    proc = run_cli("train.ipynb", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "train.ipynb:cell 4, line 3, col 34: DDP101 device index 0 is hard-coded" in proc.stdout
    assert "DDP001" not in proc.stdout  # the magics and shell lines are not Python and are skipped


def test_a_folder_of_notebooks_is_discovered(tmp_path):
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "train.ipynb").write_text(TRAIN)
    (tmp_path / "nb" / "clean.ipynb").write_text(notebook(("code", ["x = 1\n"])))
    proc = run_cli("nb", cwd=tmp_path)
    assert "nb/train.ipynb:cell 4" in proc.stdout and proc.stdout.strip().endswith("in 1 file.")
    data = json.loads(run_cli("--output-format", "json", "nb", cwd=tmp_path).stdout)
    assert data["summary"]["files"] == 2
    assert {(d["cell"], d["line"], d["column"]) for d in data["diagnostics"] if d["code"] == "DDP101"} == {(4, 3, 34)}


def test_sarif_names_the_notebook_cell(tmp_path):
    (tmp_path / "train.ipynb").write_text(TRAIN)
    log = json.loads(run_cli("--output-format", "sarif", "train.ipynb", cwd=tmp_path).stdout)
    result = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "DDP101")
    location = result["locations"][0]
    assert location["physicalLocation"]["artifactLocation"]["uri"].endswith("train.ipynb")
    assert "region" not in location["physicalLocation"]  # lines of the .ipynb JSON would be wrong ones
    assert location["logicalLocations"] == [{"name": "cell 4", "kind": "module"}]
    assert location["properties"] == {"notebookCell": 4, "cellLine": 3, "cellColumn": 34, "cellEndLine": 3, "cellEndColumn": 42}


def test_a_syntax_error_in_a_cell_is_located_in_it(tmp_path):
    (tmp_path / "broken.ipynb").write_text(notebook(("code", HEAD), ("code", ["def f(:\n", "    pass\n"])))
    proc = run_cli("broken.ipynb", cwd=tmp_path)
    assert proc.returncode == 1 and "broken.ipynb:cell 2, line 1, col 5: DDP001 syntax error" in proc.stdout


def test_a_cell_whose_continuation_line_starts_with_percent_stays_python():
    source = notebook_source(notebook(("code", ["msg = ('%d items'\n", "       % 3)\n"])))
    assert source.text == "msg = ('%d items'\n       % 3)\n"


def test_magics_become_pass_at_their_indentation():
    source = notebook_source(notebook(("code", ["for i in range(2):\n", "    %time f(i)\n", "x = !ls\n"])))
    assert source.text == "for i in range(2):\n    pass\npass\n"
    assert source.cell_lines == ((1, 1), (1, 2), (1, 3))


def test_a_notebook_of_another_language_has_nothing_to_lint(tmp_path):
    (tmp_path / "r.ipynb").write_text(notebook(("code", ["library(torch)\n"]), language="R"))
    assert run_cli("r.ipynb", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("kernelspec", ["python3", ["python"], {"language": ["python"]}])
def test_a_kernelspec_of_another_shape_is_linted_as_python(tmp_path, kernelspec):
    """nbformat wants a table; any other shape says nothing about the language (it was an internal error)."""
    data = json.loads(TRAIN)
    data["metadata"]["kernelspec"] = kernelspec
    (tmp_path / "odd.ipynb").write_text(json.dumps(data))
    (tmp_path / "train.ipynb").write_text(TRAIN)
    proc = run_cli("odd.ipynb", "train.ipynb", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    assert "odd.ipynb:cell 4, line 3, col 34: DDP101" in proc.stdout
    assert "train.ipynb:cell 4, line 3, col 34: DDP101" in proc.stdout


def test_a_broken_notebook_is_one_line(tmp_path):
    (tmp_path / "bad.ipynb").write_text("{not json")
    (tmp_path / "old.ipynb").write_text(json.dumps({"worksheets": []}))
    proc = run_cli("bad.ipynb", "old.ipynb", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "ddplint: error: bad.ipynb: not a Jupyter notebook: invalid JSON (Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1))",
        "ddplint: error: old.ipynb: not a Jupyter notebook: no `cells` list (nbformat 4 is supported)",
    ]


def test_fix_leaves_notebooks_alone_and_offers_no_fix_on_them(tmp_path):
    nb = notebook(("code", [*HEAD, "import os\n", "dist.init_process_group('gloo')\n", "os.makedirs('out')\n"]))
    (tmp_path / "train.ipynb").write_text(nb)
    proc = run_cli("--fix", "train.ipynb", cwd=tmp_path)
    assert (tmp_path / "train.ipynb").read_text() == nb
    assert "DDP304" in proc.stdout and "[*]" not in proc.stdout


def test_the_size_cap_applies_to_a_notebooks_code_not_its_outputs(tmp_path):
    data = json.loads(TRAIN)
    image = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBOR" * 200_000}}
    data["cells"][1]["outputs"] = [image]  # about 1 MB of plot output
    (tmp_path / "plots.ipynb").write_text(json.dumps(data))
    proc = run_cli("plots.ipynb", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "plots.ipynb:cell 4, line 3, col 34: DDP101" in proc.stdout
    huge = notebook(("code", ["x = 1\n" * 100_000]))  # 600 KB of code
    (tmp_path / "huge.ipynb").write_text(huge)
    proc = run_cli("huge.ipynb", cwd=tmp_path)
    assert proc.returncode == 2 and "the notebook's code is 585 KiB, larger than the 512 KiB" in proc.stderr

"""--add-noqa: suppression comments on the lines with findings, written safely."""

from __future__ import annotations

import ast
import os
import textwrap

from conftest import run_cli

SCRIPT = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.Linear(2, 2).to("cuda:0")  # move the model
    os.makedirs("out"); y = torch.zeros(1).to("cuda:0")
    z = torch.zeros(1).to("cuda:0")  # noqa: E501
    w = torch.zeros(1).to("cuda:0")  # noqa: DDP304
    """)


def test_add_noqa_comments_every_finding_and_keeps_existing_comments(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    proc = run_cli("--add-noqa", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "Added `# noqa` to 4 lines in 1 file.\n"
    lines = path.read_text().splitlines()
    assert lines[5] == 'model = torch.nn.Linear(2, 2).to("cuda:0")  # move the model  # noqa: DDP101'
    assert lines[6] == 'os.makedirs("out"); y = torch.zeros(1).to("cuda:0")  # noqa: DDP101, DDP304'
    assert lines[7] == 'z = torch.zeros(1).to("cuda:0")  # noqa: E501, DDP101'
    assert lines[8] == 'w = torch.zeros(1).to("cuda:0")  # noqa: DDP304, DDP101'
    after = run_cli("train.py", cwd=tmp_path)
    assert after.returncode == 0 and after.stdout == "All checks passed (1 file).\n"
    again = run_cli("--add-noqa", "train.py", cwd=tmp_path)
    assert again.returncode == 0 and again.stderr == "Added `# noqa` to 0 lines in 0 files.\n"


def test_add_noqa_follows_the_selection(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    run_cli("--add-noqa", "--select", "DDP304", "--extend-select", "DDP402", "train.py", cwd=tmp_path)
    text = path.read_text()
    assert 'dist.init_process_group("gloo")  # noqa: DDP402' in text
    assert 'os.makedirs("out"); y = torch.zeros(1).to("cuda:0")  # noqa: DDP304\n' in text
    assert "DDP101" not in text


def test_lines_that_cannot_end_in_a_comment_are_left_alone_and_reported(tmp_path):
    path = tmp_path / "train.py"
    source = (
        'import torch\nimport torch.distributed as dist\n\ndist.init_process_group("gloo")\n'
        "model = torch.nn.Linear(2, 2)\n"
        'torch.save(model.state_dict(), """ckpt\n.pt""")\n'
        'x = torch.zeros(1).to("cuda:0") + \\\n    1\n'
        'y = torch.zeros(1).to("cuda:0")\n'
    )
    path.write_text(source)
    proc = run_cli("--add-noqa", "train.py", cwd=tmp_path)
    assert proc.returncode == 0
    assert "ddplint: warning: train.py:6: cannot add `# noqa`: the line ends inside a multi-line string" in proc.stderr
    assert "ddplint: warning: train.py:8: cannot add `# noqa`: the line is continued by a backslash" in proc.stderr
    assert proc.stderr.endswith("Added `# noqa` to 1 line in 1 file.\n")
    text = path.read_text()
    ast.parse(text)
    assert text == source.replace('y = torch.zeros(1).to("cuda:0")\n', 'y = torch.zeros(1).to("cuda:0")  # noqa: DDP101\n')


def test_line_endings_encoding_and_mode_are_kept(tmp_path):
    path = tmp_path / "train.py"
    source = (
        "# -*- coding: latin-1 -*-\nimport torch\nimport torch.distributed as dist\n"
        'dist.init_process_group("gloo")\nname = "café"\nx = torch.zeros(1).to("cuda:0")\n'
    )
    path.write_bytes(source.replace("\n", "\r\n").encode("latin-1"))
    os.chmod(path, 0o640)
    assert run_cli("--add-noqa", "train.py", cwd=tmp_path).returncode == 0
    expected = source.replace('to("cuda:0")\n', 'to("cuda:0")  # noqa: DDP101\n').replace("\n", "\r\n")
    assert path.read_bytes() == expected.encode("latin-1")
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["train.py"]  # no temporary file left


def test_add_noqa_refuses_stdin_and_fix(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    for args in (["--add-noqa", "-"], ["--add-noqa", "--fix", "train.py"], ["--add-noqa", "--diff", "train.py"]):
        proc = run_cli(*args, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, (args, proc.stderr)
    assert (tmp_path / "train.py").read_text() == SCRIPT


def test_add_noqa_on_a_missing_path_is_an_error(tmp_path):
    proc = run_cli("--add-noqa", "nope.py", cwd=tmp_path)
    assert proc.returncode == 2 and "ddplint: error: nope.py: no such file or directory" in proc.stderr

"""A finding at a call of a project helper names where the mistake is inside the helper: in the
text line, in the JSON `related` list and as SARIF relatedLocations (tests/test_sarif.py
validates those against the schema), also when served from the cache."""

from __future__ import annotations

import json
import shutil

from conftest import FIXTURES, run_cli

PROJECTS = FIXTURES / "lint" / "projects"


def related_of(cwd, *args: str) -> dict[str, list[tuple[str, int, int]]]:
    proc = run_cli("--output-format", "json", *args, cwd=cwd)
    assert proc.returncode == 1, proc.stderr
    return {
        d["code"]: [(r["path"], r["line"], r["column"]) for r in d["related"]] for d in json.loads(proc.stdout)["diagnostics"]
    }


def test_a_helper_save_and_makedirs_point_into_the_helper(tmp_path):
    project = shutil.copytree(PROJECTS / "unguarded_save_helper", tmp_path / "project")
    assert related_of(project, "--no-cache", "train.py") == {
        "DDP301": [("checkpointing.py", 9, 5)],
        "DDP304": [("checkpointing.py", 8, 5)],
    }
    text = run_cli("--no-cache", "train.py", cwd=project).stdout
    assert "DDP301 save_checkpoint() saves a checkpoint on every rank" in text
    assert "(at checkpointing.py:9:5)" in text.splitlines()[0] + text.splitlines()[1]


def test_a_helper_load_and_a_pinned_port_point_into_the_helper(tmp_path):
    loads = shutil.copytree(PROJECTS / "helper_restore_without_map_location", tmp_path / "loads")
    assert related_of(loads, "--no-cache", "train.py")["DDP303"] == [("ckpt_utils.py", 9, 13)]
    port = shutil.copytree(PROJECTS / "helper_pins_port", tmp_path / "port")
    ((path, line, _),) = related_of(port, "--no-cache", "train.py")["DDP403"]
    assert path == "dist_setup.py" and "MASTER_PORT" in (port / path).read_text().splitlines()[line - 1]


def test_an_absolute_path_on_the_command_line_gives_absolute_related_paths(tmp_path):
    project = shutil.copytree(PROJECTS / "unguarded_save_helper", tmp_path / "project")
    related = related_of(tmp_path, "--no-cache", str(project / "train.py"))
    assert related["DDP301"] == [(str((project / "checkpointing.py").resolve()), 9, 5)]


def test_the_cache_keeps_the_related_places(tmp_path):
    project = shutil.copytree(PROJECTS / "unguarded_save_helper", tmp_path / "project")
    first = related_of(project, "train.py")
    assert (project / ".ddplint_cache").is_dir()
    assert related_of(project, "train.py") == first


def test_a_finding_in_the_linted_file_itself_has_no_related_places(tmp_path):
    assert related_of(FIXTURES / "lint" / "device", "--no-cache", "hardcoded_to_cuda0.py") == {"DDP101": []}


def test_a_write_in_a_function_of_the_file_names_the_call_every_rank_makes(tmp_path):
    """A save inside the script's own save_checkpoint() is reported where it writes, with the
    unguarded call that reaches it (the guarded call is not the one named)."""
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def save_checkpoint(state, name):\n    torch.save(state, name)\n\n\n"
        "def main():\n    dist.init_process_group('gloo')\n"
        "    if dist.get_rank() == 0:\n        save_checkpoint({}, 'best.pt')\n"
        "    save_checkpoint({}, 'last.pt')\n    dist.destroy_process_group()\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    assert related_of(tmp_path, "--no-cache", "train.py") == {"DDP301": [("train.py", 13, 5)]}


def test_a_sampler_built_by_a_function_of_the_file_names_the_call_that_takes_it(tmp_path):
    """DDP202 at a sampler that a helper of the script returns names the call giving it to the
    loader: that is where the epoch loop reads it."""
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
        "from torch.utils.data.distributed import DistributedSampler\n\n\n"
        "def make_sampler(data):\n    return DistributedSampler(data, shuffle=True)\n\n\n"
        "def main():\n    dist.init_process_group('gloo')\n    data = torch.randn(64, 4)\n"
        "    loader = DataLoader(data, batch_size=8, sampler=make_sampler(data))\n"
        "    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))\n"
        "    for epoch in range(2):\n        for x in loader:\n            model(x).sum().backward()\n"
        "    dist.destroy_process_group()\n\n\nif __name__ == '__main__':\n    main()\n"
    )
    assert related_of(tmp_path, "--no-cache", "train.py") == {"DDP202": [("train.py", 14, 53)]}


def test_a_write_two_helpers_deep_names_every_call_on_the_way(tmp_path):
    (tmp_path / "logs.py").write_text('def open_log(path):\n    return open(path, "a")\n')
    (tmp_path / "runner.py").write_text(
        "from logs import open_log\n\n\ndef start(out):\n    handle = open_log(out)\n    handle.write('start\\n')\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch.distributed as dist\n\nimport runner\n\n"
        'dist.init_process_group("gloo")\nrunner.start("train.log")\ndist.destroy_process_group()\n'
    )
    assert related_of(tmp_path, "--no-cache", "train.py") == {"DDP302": [("runner.py", 5, 14), ("logs.py", 2, 12)]}


def test_a_call_that_is_no_dotted_name_is_named_by_its_shape(tmp_path):
    """`super().__init__(args)` reaching a shared log through two helpers: the message names the
    call as written, and the chain goes through both helpers to the open()."""
    project = shutil.copytree(PROJECTS / "logger_file_per_rank_in_nested_helper", tmp_path / "project")
    assert related_of(project, "--no-cache", "train_twin.py") == {
        "DDP302": [("base.py", 13, 23), ("utils/logger.py", 17, 45), ("utils/logger.py", 23, 12)]
    }
    text = run_cli("--no-cache", "train_twin.py", cwd=project).stdout
    assert "DDP302 super().__init__() writes to a file on every rank" in text


def test_a_load_in_a_function_of_the_file_names_the_call_every_rank_makes(tmp_path):
    """As for the writes: torch.load inside a method of the linted file points at the call of it
    that every rank makes (the resume in `train()`), where the fix is decided."""
    script = tmp_path / "train.py"
    script.write_text(
        "import os\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "\n"
        "\n"
        "class Trainer:\n"
        "    def load_checkpoint(self, path):\n"
        "        self.model.load_state_dict(torch.load(path))\n"
        "\n"
        "    def train(self):\n"
        "        self.model = torch.nn.Linear(2, 2).cuda()\n"
        "        self.load_checkpoint('last.pt')\n"
        "\n"
        "\n"
        "if __name__ == '__main__':\n"
        "    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
        "    dist.init_process_group('nccl')\n"
        "    Trainer().train()\n"
        "    dist.destroy_process_group()\n"
    )
    assert related_of(tmp_path, "--no-cache", "train.py")["DDP303"] == [("train.py", 12, 9)]

"""The test command itself: the README's and CI's are one command, and the longest files are handed out first."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from conftest import LONGEST_FILES_S, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_exactly_the_readme_test_command():
    readme_commands = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    ci_command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci_command in readme_commands
    # Without it xdist re-sorts files by their number of tests and the order below is lost.
    assert "--dist loadfile --no-loadscope-reorder" in ci_command


def test_the_longest_files_go_first_and_each_file_keeps_its_order():
    def item(name: str, test: str) -> SimpleNamespace:
        return SimpleNamespace(path=ROOT / "tests" / name, name=test)

    items = [item("test_a.py", "1"), item("test_chaos.py", "1"), item("test_a.py", "2"),
             item("test_template_learns.py", "1"), item("test_chaos.py", "2"), item("test_b.py", "1")]
    pytest_collection_modifyitems(None, items)
    assert [(i.path.name, i.name) for i in items] == [
        ("test_template_learns.py", "1"), ("test_chaos.py", "1"), ("test_chaos.py", "2"),
        ("test_a.py", "1"), ("test_a.py", "2"), ("test_b.py", "1")]
    assert LONGEST_FILES_S["test_template_learns.py"] > LONGEST_FILES_S["test_chaos.py"]
    assert all((ROOT / "tests" / name).is_file() for name in LONGEST_FILES_S), "a listed file was renamed"

"""docs/python.md's worked example, run as written (a script of the installed
package) against the loopback server serving the README's model names, the
doc's servers (`http://gpu-box:…`) replaced by its URL."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")


def worked_example() -> str:
    section = DOC.split("## A worked example", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]


@pytest.fixture(scope="module")
def readme_server():
    with LoopbackServer(model=["Qwen/Qwen3-32B", "Qwen/Qwen3-8B"]) as srv:
        yield srv


def test_the_worked_example_runs(readme_server, tmp_path):
    make_corpus(tmp_path / "stories.jsonl", 3, seed=28)
    code = re.sub(r"http://gpu-box:800\d", readme_server.base_url, worked_example())
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("complete {")
    assert lines[1].startswith("story-000 ")
    assert "'group', 'statistic', 'mean'" in lines[2]
    assert "3 pairs" in r.stdout and "mean_nr" in r.stdout
    for name in ("positions.jsonl", "stories.csv", "groups.csv", "run.json"):
        assert (tmp_path / "runs" / "a" / name).is_file()
    assert (tmp_path / "runs" / "cmp" / "compare.md").is_file()
    assert "GPU" in r.stdout  # the estimate's cost lines


def test_the_doc_names_every_verb():
    import tension

    for verb in ("score", "estimate", "metrics", "compare", "fairplay", "fairplay_metrics", "generate"):
        assert f"`tension.{verb}(" in DOC and hasattr(tension, verb)


def test_the_readmes_python_example_runs(readme_server, tmp_path):
    pytest.importorskip("pandas")  # its last line is to_pandas()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", readme, flags=re.S)[0]
    make_corpus(tmp_path / "stories.jsonl", 2, seed=29)
    code = re.sub(r"http://gpu-box:800\d", readme_server.base_url, code)
    code = code.rstrip().rsplit("\n", 1)
    code = f"{code[0]}\nprint({code[1].split('#')[0].strip()}.shape)\n"  # the last expression, shown
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("(2, ")  # two stories, one row each

"""docs/python.md's examples, every one run as written (as a script, in this process
with a namespace of its own: tension.testing.script; a block with a top-level `await`
as a notebook cell runs it; README's example in an interpreter of its own) against the
test server serving the README's model names, the doc's servers (`http://gpu-box:…`)
replaced by its URL: docs that drift from the API fail here. The examples run in this
process talk to the server's in-process door (the same answers, no socket: the API is
their subject, not the wire); README's interpreter of its own, to the loopback server.
The worked example's output is checked line by line."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import LoopbackServer
from tension.testing.script import run_python_here

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")


BLOCKS = re.findall(r"```python\n(.*?)```", DOC, flags=re.S)


def doc_files(folder: Path) -> None:
    """What the examples read: stories.jsonl ({"id", "group", "text"}), and the same
    stories as stories.csv with the columns story_id, group, body."""
    make_corpus(folder / "stories.jsonl", 3, seed=28)
    rows = [json.loads(line) for line in (folder / "stories.jsonl").read_text().splitlines()]
    with (folder / "stories.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["story_id", "group", "body"])
        for i, r in enumerate(rows):
            w.writerow([f"00{i}", r["group"], r["text"]])


def test_the_doc_has_examples():
    assert len(BLOCKS) >= 5 and worked_example() in BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_example_runs(docs_server, tmp_path, monkeypatch, index):
    code = BLOCKS[index]
    if code == worked_example():
        pytest.skip("the worked example: test_the_worked_example_runs runs it and checks its output")
    if "import datasets" in code:
        pytest.importorskip("datasets")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # local files only: no hub
        monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if "pd." in code or "to_pandas" in code:
        pytest.importorskip("pandas")
    doc_files(tmp_path)
    r = run_python_here(re.sub(r"http://gpu-box:800\d", docs_server.base_url, code), tmp_path)
    assert r.returncode == 0, f"docs/python.md example {index + 1}:\n{code}\n{r.stderr}"


def worked_example() -> str:
    section = DOC.split("## A worked example", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]


README_MODELS = ["Qwen/Qwen3-32B", "Qwen/Qwen3-8B"]


@pytest.fixture(scope="module")
def readme_server():
    with LoopbackServer(model=README_MODELS) as srv:
        yield srv


@pytest.fixture(scope="module")
def docs_server():
    with InProcessServer(README_MODELS).serving() as srv:
        yield srv


def test_the_worked_example_runs(docs_server, tmp_path):
    make_corpus(tmp_path / "stories.jsonl", 3, seed=28)
    r = run_python_here(re.sub(r"http://gpu-box:800\d", docs_server.base_url, worked_example()), tmp_path)
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
    # a script of its own, in an interpreter of its own: the first Python a README reader runs
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("(2, ")  # two stories, one row each

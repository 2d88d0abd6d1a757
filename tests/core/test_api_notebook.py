"""docs/python.ipynb executed in a real Jupyter kernel (nbclient, ipykernel) against
the loopback server: the blocking API inside the kernel's running event loop, the
async twin awaited, tables as DataFrames; then (issue 38) a DataFrame corpus and a
`datasets.Dataset` corpus scored with two judges at once on one cache, shown as
tables with string ids, a curve plotted, the view opened, and the same stories
from JSON Lines sending nothing. Slow step (.ci/run installs the `notebook` extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

ROOT = Path(__file__).resolve().parents[2]
IDS = ["007", "7", "2024"]  # ids a DataFrame or a Dataset would read as numbers


def chat_requests(srv: LoopbackServer) -> int:
    return srv.count(kind="generation") + srv.count(kind="judge")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # jupyter_client's own, in this process
def test_the_example_notebook_runs_in_a_jupyter_kernel(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("pandas")
    pytest.importorskip("datasets")
    pytest.importorskip("matplotlib")
    src = make_corpus(tmp_path / "plain.jsonl", 3, seed=28)
    rows = [json.loads(line) for line in src.read_text().splitlines()]
    for row, i in zip(rows, IDS):
        row["id"] = i
    (tmp_path / "stories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # datasets' own cache: no hub, nothing of the user's
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sent_from_jsonl = None
    with LoopbackServer(model=["Qwen/Qwen3-32B", "Qwen/Qwen3-8B"]) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)  # the kernel inherits it: the notebook names no server
        nb = nbformat.read(ROOT / "docs" / "python.ipynb", as_version=4)
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        with client.setup_kernel():
            for index, cell in enumerate(nb.cells):
                before = chat_requests(srv)
                client.execute_cell(cell, index)
                if "from-jsonl" in cell.metadata.get("tags", []):
                    sent_from_jsonl = chat_requests(srv) - before
        assert srv.count() > 0
    assert sent_from_jsonl == 0  # the stories scored from a DataFrame: nothing sent again from JSON Lines
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stdout")
    assert text.count("complete {'generation'") == 2 and "3 pairs" in text
    assert "complete complete" in text  # the two judges at once
    assert "view 200 True" in text
    html = [o.data["text/html"] for o in outputs if o.output_type in ("execute_result", "display_data")
            and "text/html" in o.data]
    assert "mean_nr" in html[0]  # a.to_pandas()
    shown = [h for h in html if "ScoreResult" in h]  # the result shown as a table
    assert shown and all(f"<td>{i}</td>" in shown[0] for i in IDS)
    # the view: nbclient's kernel was started by no Jupyter server, so no origin may frame it and it is
    # its link, saying why (in JupyterLab, inline: tests/view/test_view_notebook_frame.py)
    views = [h for h in html if "view: <a href" in h]
    assert views and "<iframe" not in views[0] and "Not shown here: no Jupyter server started this kernel" in views[0]
    assert [o for o in outputs if "image/png" in o.get("data", {})]  # the curve
    for run in ("nb-a", "nb-b", "df-8b", "ds-32b", "jsonl-8b"):
        assert (tmp_path / "runs" / run / "stories.csv").is_file()

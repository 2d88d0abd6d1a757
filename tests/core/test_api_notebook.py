"""docs/python.ipynb executed in a real Jupyter kernel (nbclient, ipykernel) against
the loopback server: the blocking API inside the kernel's running event loop, the
async twin awaited, tables as DataFrames. Slow step (.ci/run installs the
`notebook` extra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # jupyter_client's own, in this process
def test_the_example_notebook_runs_in_a_jupyter_kernel(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("pandas")
    make_corpus(tmp_path / "stories.jsonl", 3, seed=28)
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    with LoopbackServer(model=["Qwen/Qwen3-32B", "Qwen/Qwen3-8B"]) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)  # the kernel inherits it: the notebook names no server
        nb = nbformat.read(ROOT / "docs" / "python.ipynb", as_version=4)
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
        assert srv.count() > 0
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stdout")
    assert text.count("complete {") == 2 and "3 pairs" in text
    html = [o for o in outputs if o.output_type == "execute_result" and "text/html" in o.data]
    assert len(html) == 2 and "mean_nr" in html[0].data["text/html"]  # the DataFrames
    for run in ("nb-a", "nb-b"):
        assert (tmp_path / "runs" / run / "stories.csv").is_file()

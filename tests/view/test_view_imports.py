"""What a `tension-run view --export` process loads: an export without the endings starts
without the server's modules (aiohttp: the view's server, core/view/app.py) and without
the fair-play pipeline (its kernels, scipy.special), which only the pages of a fair-play
run's cached answers read (core/pipelines/recalls.py): together ≈ 0.35 s of the export's
≈ 2 s of CPU (bench/startup.py, bench/RESULTS.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_LOADED = """
import runpy, sys
sys.argv = ["tension-run", *sys.argv[1:]]
try:
    runpy.run_module("tension.core.cli", run_name="__main__")
except SystemExit as e:
    code = e.code
print(code, "aiohttp" in sys.modules, "tension.core.pipelines.fairplay.recall" in sys.modules)
"""


@pytest.mark.parametrize("fairplay,endings,loaded", [(False, False, False), (True, False, False), (True, True, True)],
                         ids=["score-runs", "with-a-fairplay-run", "with-the-endings"])
def test_an_export_loads_only_what_its_runs_pages_need(runs, tmp_path, fairplay, endings, loaded):
    """`loaded`: the server's modules and the fair-play pipeline. With --endings the pages
    read the cache by each run's pipeline (the fair-play run's readers' answers among
    them), and the pipelines' clients come with them."""
    dirs = [str(runs.a), str(runs.b)] + ([str(runs.fp)] if fairplay else [])
    done = subprocess.run([sys.executable, "-c", _LOADED, "view", *dirs, "--cache", str(runs.cache), "--export",
                           str(tmp_path / "export"), *(["--endings"] if endings else [])], capture_output=True,
                          text=True, timeout=120, env=runs.env)
    code, aiohttp, fairplay_pipeline = done.stdout.split()[-3:]
    assert code == "0", done.stderr
    assert (tmp_path / "export" / "index.html").is_file()
    assert (aiohttp, fairplay_pipeline) == (str(loaded), str(loaded))

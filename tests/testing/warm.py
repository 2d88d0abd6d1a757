"""numba's cache of the kernels, filled once before the test workers reach them.

A fresh clone has no compiled kernels: each xdist worker that first calls one compiles
it (≈ 25 s of a fresh clone's test run, several workers compiling the same kernels at
once). tests/conftest.py starts this module in the controller, beside the workers'
collection; it runs the verbs whose kernels the tests use (score with its report,
subsample, fairplay-metrics, estimate) in a private folder against an in-process
server, so every kernel is compiled with the types the product gives it. A worker
that gets there first compiles the kernel itself, as before; on a warm cache this
only loads them (≈ 2 s of CPU).

    python -m tension.testing.warm
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def warm() -> list[int]:
    """The verbs run once each, their exit statuses returned (what they print is dropped;
    tests/core/test_cli.py checks that every one exits 0)."""
    with tempfile.TemporaryDirectory(prefix="tension-warm-") as tmp:
        d = Path(tmp)
        os.environ["HOME"] = str(d)  # never the user's cache or key
        os.environ["XDG_CACHE_HOME"] = str(d / ".cache")
        os.environ.pop("OPENAI_API_KEY", None)
        from tension.core.cli import main
        from tension.testing.corpus import make_corpus
        from tension.testing.inprocess import InProcessServer

        corpus = make_corpus(d / "c.jsonl", 2, seed=3)
        quiet = io.StringIO()
        statuses = []
        with InProcessServer(model="test-gen").serving() as srv, contextlib.redirect_stdout(quiet), \
                contextlib.redirect_stderr(quiet):
            server = ["--base-url", srv.base_url, "--model", "test-gen", "--cache", str(d / "cache")]
            for argv in (["score", str(corpus), "--out", str(d / "run"), *server, "--endings", "4", "--no-progress"],
                         ["subsample", str(d / "run"), "--cache", str(d / "cache"), "--draws", "2", "--ks", "1,2"],
                         ["fairplay-metrics", str(ROOT / "examples" / "fairplay_readers.jsonl"), "--out",
                          str(d / "fp"), "--max-plots", "0", "--no-progress", "--resamples", "20"],
                         ["estimate", str(corpus), *server, "--endings", "4"]):
                statuses.append(main(argv))
    return statuses


if __name__ == "__main__":
    raise SystemExit(max(warm()))

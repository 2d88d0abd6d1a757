"""The test server's two doors, side by side: the same `tension-run score` (in this
process, `main([...])`) against the loopback HTTP server (tests/testing/openai_server.py,
its aiohttp server on a thread of this process) and against the in-process door
(tests/testing/inprocess.py, the same answers without a socket). What a spec pays for
the wire when the wire is not its subject (issue 39): the client's CPU (user + sys of
this process, the server's thread included) per run and per request, the two doors
interleaved round by round so that the machine's load falls on both alike.

    python bench/doors.py [--rounds 4] [--stories 3] [--endings 6]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import tempfile
from pathlib import Path

from tension.core.cli import main as cli
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import LoopbackServer


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def score(base_url: str, corpus: Path, out: Path, endings: int) -> None:
    """A score run as the judge-path specs run it: chat requests, no report."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = cli(["score", str(corpus), "--out", str(out), "--base-url", base_url, "--model", "test-gen",
                   "--judge-model", "test-judge", "--endings", str(endings), "--seed", "5", "--judge-batch", "off",
                   "--no-progress", "--no-report", "--cache", str(out.with_suffix(".lmdb"))])
    if rc != 0:
        raise SystemExit(f"score exited {rc} on {base_url}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--stories", type=int, default=3)
    ap.add_argument("--endings", type=int, default=6)
    args = ap.parse_args()
    spent = {"http": 0.0, "in-process": 0.0}
    with tempfile.TemporaryDirectory(prefix="doors-") as tmp, \
            LoopbackServer(model=["test-gen", "test-judge"]) as http, \
            InProcessServer(["test-gen", "test-judge"]).serving() as door:
        d = Path(tmp)
        corpus = make_corpus(d / "c.jsonl", args.stories, seed=11)
        servers = {"http": http, "in-process": door}
        for name, srv in servers.items():  # imports, first connections: not timed
            score(srv.base_url, corpus, d / f"warm-{name}", args.endings)
        requests = http.count()
        for r in range(args.rounds):
            for name in (("http", "in-process") if r % 2 == 0 else ("in-process", "http")):
                c = cpu()
                score(servers[name].base_url, corpus, d / f"{name}-{r}", args.endings)
                spent[name] += cpu() - c
    per_run = {k: v / args.rounds for k, v in spent.items()}
    print(f"a score run of {args.stories} stories x {args.endings} endings ({requests} requests), "
          f"CPU per run over {args.rounds} interleaved rounds: HTTP {per_run['http']:.3f} s "
          f"({1e6 * per_run['http'] / requests:.0f} us a request), in process {per_run['in-process']:.3f} s "
          f"({1e6 * per_run['in-process'] / requests:.0f} us a request): {per_run['http'] / per_run['in-process']:.2f}x")


if __name__ == "__main__":
    main()

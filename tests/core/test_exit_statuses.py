"""One exit status for one kind of error, in every verb (issue 36, O3; the table
"Exit statuses" in docs/reliability.md; core/errors.status_of decides it): a
missing input is 1 whether it is a corpus, curves, a run folder or a cache a cache
verb looks at; a malformed input is 1; a damaged cache is 2 wherever a verb opens it;
a bad flag value is 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus

SERVER = "http://127.0.0.1:1"  # every case stops before a request: nothing listens there


@pytest.fixture(scope="module")
def ground(tmp_path_factory, _session_server):
    """A scored run and its cache, made once; each case copies what it damages."""
    root = tmp_path_factory.mktemp("exit-statuses")
    corpus = make_corpus(root / "c.jsonl", 1, seed=4)
    argv = ["score", str(corpus), "--out", str(root / "run"), "--base-url", _session_server.reset().base_url,
            "--model", "test-gen", "--endings", "3", "--seed", "1", "--cache", str(root / "cache"), "--no-progress"]
    assert main(argv) == 0
    return root


def _server(live: str) -> list[str]:
    return ["--base-url", live, "--model", "test-gen", "--no-progress"]


def _missing(verb: str, g: Path, t: Path, live: str) -> list[str]:
    """`verb` given an input path that names nothing."""
    nope = str(t / "nope")
    run = str(g / "run")
    return {
        "score": ["score", nope + ".jsonl", "--out", str(t / "o"), *_server(live)],
        "estimate": ["estimate", nope + ".jsonl", *_server(live), "--tokenizer", "words"],
        "bench": ["bench", "--corpus", nope + ".jsonl", *_server(live), "--tokenizer", "words"],
        "generate": ["generate", nope + ".jsonl", "--out", str(t / "g.jsonl"), "--base-url", live,
                     "--model", "test-gen", "--no-progress"],
        "fairplay": ["fairplay", nope + ".jsonl", "--out", str(t / "o"), *_server(live)],
        "fairplay --suspects": ["fairplay", str(g / "c.jsonl"), "--suspects", nope + ".json", "--out", str(t / "o"),
                                *_server(live)],
        "fairplay-metrics": ["fairplay-metrics", nope + ".jsonl", "--out", str(t / "o")],
        "metrics": ["metrics", nope + ".jsonl", "--out", str(t / "o")],
        "report": ["report", nope],
        "compare A": ["compare", nope, run],
        "compare B": ["compare", run, nope],
        "view": ["view", nope, "--port", "0"],
        "view --export": ["view", nope, "--export", str(t / "site")],
        "subsample": ["subsample", nope],
        "estimate --pilot": ["estimate", str(g / "c.jsonl"), *_server(live), "--tokenizer", "words", "--pilot", nope],
        "cache drop --run": ["cache", "drop", "--run", nope, "--role", "judge", "--yes"],
        "cache stats PATH": ["cache", "stats", nope],
        "cache stats --cache": ["cache", "stats", "--cache", nope],
        "cache verify": ["cache", "verify", nope],
        "cache recover": ["cache", "recover", nope, str(t / "new")],
        "cache drop": ["cache", "drop", nope, "--role", "judge"],
        "cache merge": ["cache", "merge", nope, str(g / "cache"), str(t / "dst")],
    }[verb]


def _malformed(verb: str, g: Path, t: Path, live: str) -> list[str]:
    """`verb` given an input that is there but cannot be read as what it must be: a
    binary file for a JSON Lines input, a damaged run.json for a run folder."""
    junk = t / "junk.jsonl"
    junk.write_bytes(bytes(range(256)) * 40)
    run = t / "run"
    shutil.copytree(g / "run", run)
    (run / "run.json").write_text("{not json\n")
    return {
        "score": ["score", str(junk), "--out", str(t / "o"), *_server(live), "--cache", str(t / "c")],
        "estimate": ["estimate", str(junk), *_server(live), "--tokenizer", "words", "--cache", str(t / "c")],
        "bench": ["bench", "--corpus", str(junk), *_server(live), "--tokenizer", "words", "--cache", str(t / "c")],
        "generate": ["generate", str(junk), "--out", str(t / "g.jsonl"), "--base-url", live, "--model", "test-gen",
                     "--no-progress", "--cache", str(t / "c")],
        "fairplay": ["fairplay", str(junk), "--out", str(t / "o"), *_server(live), "--cache", str(t / "c")],
        "fairplay-metrics": ["fairplay-metrics", str(junk), "--out", str(t / "o")],
        "metrics": ["metrics", str(junk), "--out", str(t / "o")],
        "report": ["report", str(run)],
        "compare": ["compare", str(run), str(g / "run")],
        "subsample": ["subsample", str(run), "--cache", str(g / "cache")],
    }[verb]


def _damaged_cache(verb: str, g: Path, t: Path, live: str) -> list[str]:
    """`verb` opening a cache whose data.mdb was cut short (a partial copy)."""
    cache = t / "cache"
    shutil.copytree(g / "cache", cache)
    with open(cache / "data.mdb", "r+b") as f:
        f.truncate(40_000)
    corpus = str(g / "c.jsonl")
    ideas = t / "ideas.jsonl"
    ideas.write_text('{"idea": "a lighthouse keeper finds a letter"}\n')
    c = ["--cache", str(cache)]
    return {
        "score": ["score", corpus, "--out", str(t / "o"), *_server(live), "--endings", "3", *c],
        "estimate": ["estimate", corpus, *_server(live), "--tokenizer", "words", *c],
        "bench": ["bench", "--corpus", corpus, *_server(live), "--tokenizer", "words", *c],
        "generate": ["generate", str(ideas), "--out", str(t / "g.jsonl"), "--base-url", live, "--model", "test-gen",
                     "--no-progress", *c],
        "fairplay": ["fairplay", corpus, "--out", str(t / "o"), *_server(live), *c],
        "subsample": ["subsample", str(g / "run"), *c],
        "cache stats": ["cache", "stats", *c],
        "cache drop": ["cache", "drop", *c, "--role", "judge"],
        "cache merge": ["cache", "merge", str(cache), str(t / "dst")],
    }[verb]


def _bad_flag(verb: str, g: Path, t: Path, live: str) -> list[str]:
    """`verb` with a flag's value out of its bounds (its input otherwise fine)."""
    corpus, run, cache = str(g / "c.jsonl"), str(g / "run"), str(g / "cache")
    return {
        "score": ["score", corpus, "--out", str(t / "o"), *_server(SERVER), "--endings", "0"],
        "estimate": ["estimate", corpus, *_server(SERVER), "--endings", "0"],
        "bench": ["bench", "--corpus", corpus, *_server(SERVER), "--endings", "0"],
        "generate": ["generate", corpus, "--out", str(t / "g.jsonl"), "--base-url", SERVER, "--temperature", "nan"],
        "fairplay": ["fairplay", corpus, "--out", str(t / "o"), *_server(SERVER), "--k", "0"],
        "fairplay-metrics": ["fairplay-metrics", corpus, "--out", str(t / "o"), "--bins", "0"],
        "metrics": ["metrics", run, "--out", str(t / "o"), "--window", "4"],
        "report": ["report", run, "--max-curves", "-1"],
        "compare": ["compare", run, run, "--resamples", "-5"],
        "view": ["view", run, "--port", "70000"],
        "subsample": ["subsample", run, "--draws", "0"],
        "route": ["route", SERVER, "--port", "70000"],
        "serve": ["serve", "--embedded", "--port", "70000"],
        "demo": ["demo", "--port", "70000"],
        "cache stats": ["cache", "stats", cache, "--cache", str(t / "other")],
        "cache verify": ["cache", "verify", cache, "--cache", str(t / "other")],
        "cache drop": ["cache", "drop", cache],
    }[verb]


def _server_down(verb: str, g: Path, t: Path, live: str) -> list[str]:
    """`verb` whose server does not answer (nothing listens on its port): work that
    failed once the retries ran out, as `score`'s (docs/reliability.md, "a server
    that stays down")."""
    return {
        "score": ["score", str(g / "c.jsonl"), "--out", str(t / "o"), *_server(SERVER), "--retries", "2",
                  "--cache", str(t / "c")],
        "route": ["route", SERVER, "--retries", "2"],
    }[verb]


KINDS = {"missing input": (_missing, 1), "malformed input": (_malformed, 1), "damaged cache": (_damaged_cache, 2),
         "bad flag value": (_bad_flag, 2), "server down": (_server_down, 1)}
VERBS = {
    "missing input": ["score", "estimate", "bench", "generate", "fairplay", "fairplay --suspects", "fairplay-metrics",
                      "metrics", "report",
                      "compare A", "compare B", "view", "view --export", "subsample", "estimate --pilot", "cache drop --run",
                      "cache stats PATH",
                      "cache stats --cache", "cache verify", "cache recover", "cache drop", "cache merge"],
    "malformed input": ["score", "estimate", "bench", "generate", "fairplay", "fairplay-metrics", "metrics", "report",
                        "compare", "subsample"],
    "damaged cache": ["score", "estimate", "bench", "generate", "fairplay", "subsample", "cache stats", "cache drop", "cache merge"],
    "bad flag value": ["score", "estimate", "bench", "generate", "fairplay", "fairplay-metrics", "metrics", "report",
                       "compare", "view", "subsample", "route", "serve", "demo", "cache stats", "cache verify",
                       "cache drop"],
    "server down": ["score", "route"],
}
CASES = [(kind, verb) for kind, verbs in VERBS.items() for verb in verbs]


@pytest.mark.parametrize(("kind", "verb"), CASES, ids=[f"{k}-{v}" for k, v in CASES])
def test_one_kind_of_error_has_one_exit_status_in_every_verb(kind, verb, ground, server, tmp_path, tension_run):
    build, want = KINDS[kind]
    argv = build(verb, ground, tmp_path, server.base_url)
    done = tension_run(*argv)  # argparse's own usage errors are its status too
    rc, err = done.returncode, done.stderr
    assert rc == want, f"{' '.join(argv)}: exit {rc}, want {want}\n{err}"
    assert "error" in err and "Traceback" not in err, err

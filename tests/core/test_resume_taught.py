"""M1 of ../shared/reviews/external-servers-2026-12-07.md: on a server that takes `n`
only partly (transformers serve answers one choice to any n; a hosted API refuses n
above its limit with a 400), a resume re-sent each position's first chunk. The chunk
was kept under the count the server returned and looked up under the count asked,
and what the server taught (its n limit) was not kept across runs, so the resumed
run asked n = ENDINGS first again; the stop line then said "new answers in the
cache" for answers the cache held. A user who stops and resumes within one round of
a slow queue made no progress.

Now what a server taught a run (its n limit and how it was learned, the counts its
short answers brought) is kept in the cache folder, by server and model, and put on
the next run's record of the server before its first request; a piece the cache
holds is found whatever count the resumed run asks first. Driven through the CLI
against the loopback test server, stopped with SIGTERM as a user's Ctrl-C or a
scheduler does, then resumed with the same command."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from sigterm import run_until_sigterm

from tension.cache import records
from tension.cache.store import Store
from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, LoopbackServer
from tension.testing.rules import expected_endings

ENDINGS = 4
SEED = 7
REFUSAL = "Invalid 'n': integer above maximum value. Expected a value <= {max_n}, but got {n} instead."
# The servers of the finding: one that answers one choice to any n, silently (transformers
# serve, FastChat behind some proxies), and one that refuses n above 2 with OpenAI's 400.
SERVERS = {"short answers": {"max_n": 1}, "HTTP 400": {"max_n": 2, "n_refusal": REFUSAL}}
# /v1/models says neither vllm nor llamacpp: "an OpenAI-compatible server", as transformers serve is
OWNER = "huggingface"


def _server(kind: str, **knobs) -> LoopbackServer:
    # a slow server: every request takes `delay`, so a run's requests come back in rounds
    return LoopbackServer(model="test-gen", owned_by=OWNER, **{**SERVERS[kind], **knobs})


def _argv(corpus: Path, out: Path, cache: Path, base_url: str) -> list[str]:
    return ["score", str(corpus), "--out", str(out), "--base-url", base_url, "--model", "test-gen",
            "--endings", str(ENDINGS), "--seed", str(SEED), "--cache", str(cache), "--no-progress"]


def _gen(srv: LoopbackServer) -> list:
    return [r for r in srv.requests if r.path == CHAT_PATH and r.kind == "generation"]


class Positions:
    """Each position's generation prompt, numbered, and its seed (a clean run's
    requests tell both): a request is named by (position, offset of its first choice)."""

    def __init__(self, srv: LoopbackServer):
        self.base = {_prompt(r): r.body["seed"] for r in _gen(srv)}
        self.number = {p: i for i, p in enumerate(self.base)}

    def name(self, r) -> tuple[int, int]:
        p = _prompt(r)
        return self.number[p], r.body["seed"] - self.base[p]

    def asked(self, srv: LoopbackServer) -> list[tuple[int, int]]:
        """(position, first choice) of every generation request the server got."""
        return [self.name(r) for r in _gen(srv)]

    def kept(self, srv: LoopbackServer, max_n: int, cache: Path) -> set[tuple[int, int]]:
        """(position, choice) of every choice the server answered that the cache holds: choice
        i of a request seeded s is seed s + i (`expected_endings`), at most `max_n` of them."""
        with Store(cache, readonly=True) as st:
            held = {t for _, rec in st.keys("endings") if isinstance(rec, records.Endings) for t in rec.texts}
        return {(pos, first + i) for r in _gen(srv) if r.status == 200
                for pos, first in [self.name(r)] for i in range(min(r.body["n"], max_n))
                if expected_endings(r.body["messages"], 1, r.body["seed"] + i)[0] in held}


def _prompt(r) -> str:
    return r.body["messages"][-1]["content"]


class Stop:
    """When to stop a run: `held()` has held for `seconds`, so the answers the server
    sent by then have reached the run and its cache, and the next round of the slow
    server is not back yet."""

    def __init__(self, held, seconds: float = 0.15):
        self.held, self.seconds = held, seconds
        self.since: float | None = None

    def __call__(self) -> bool:
        if self.since is None and self.held():
            self.since = time.monotonic()
        return self.since is not None and time.monotonic() - self.since >= self.seconds


def _drained(srv: LoopbackServer) -> None:
    """What a stopped run left in flight is answered (to nobody) before the next run."""
    time.sleep(srv.delay + 0.3)
    srv.reset_records()


def _stop_line_answers(err: str) -> int:
    if "this run kept nothing" in err:
        return 0
    m = re.search(r"(\d+) new answers? in the cache", err)
    assert m, err
    return int(m.group(1))


def _new_records(out: Path) -> int:
    """The answers the run's record says it wrote into the cache (records new to it)."""
    writes = json.loads((out / "run.json").read_text())["cache"]["writes"]
    return writes.get("endings", 0) + writes.get("verdicts", 0)


@pytest.fixture
def clean(tmp_path) -> tuple[Path, Path, Positions]:
    """(corpus, run folder, its positions): the run on a server that takes any n, never
    stopped: the bytes a stopped and resumed run must give."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    with LoopbackServer(model="test-gen") as srv:
        assert main(_argv(corpus, tmp_path / "clean", tmp_path / "clean-cache", srv.base_url)) == 0
        return corpus, tmp_path / "clean", Positions(srv)


@pytest.mark.parametrize("kind", list(SERVERS))
def test_a_run_stopped_within_one_round_of_a_slow_queue_makes_progress_when_resumed(tmp_path, clean, capsys, kind):
    """Stopped once a round of answers is back, resumed and stopped again, then resumed
    to the end: no run sends a request for a choice an earlier run kept, each run makes
    progress, each stop line's "new answers" are answers the cache did not hold
    (run.json's writes), and the outputs are the bytes of a run never stopped."""
    corpus, want, positions = clean
    out, cache = tmp_path / "out", tmp_path / "cache"
    max_n = SERVERS[kind]["max_n"]
    answered: set[tuple[int, int]] = set()
    with _server(kind, delay=0.4) as srv:
        argv = _argv(corpus, out, cache, srv.base_url)
        for _ in range(2):  # stopped once a round of answers is back, twice
            rc, err = run_until_sigterm(argv, Stop(lambda: any(r.status == 200 for r in _gen(srv))))
            assert rc == 130, err
            again = [a for a in positions.asked(srv) if a in answered]
            assert again == [], f"a resume asked again for (position, choice) already answered: {again}"
            kept = positions.kept(srv, max_n, cache)
            assert kept - answered, "the run made no progress"
            assert _stop_line_answers(err) == _new_records(out), err
            answered |= kept
            _drained(srv)
        srv.delay = 0.0
        assert main(argv) == 0, capsys.readouterr().err
        again = [a for a in positions.asked(srv) if a in answered]
    assert again == [], f"the last resume asked again for choices already answered: {again}"
    for name in ("positions.jsonl", "stories.csv"):
        assert (out / name).read_bytes() == (want / name).read_bytes(), name


@pytest.mark.parametrize("kind", list(SERVERS))
def test_a_limit_a_server_taught_is_kept_in_the_cache_and_said_once_by_the_next_run(tmp_path, clean, capsys, kind):
    """Stopped once the server's limit is learned (a chunk of the limit was answered):
    the resume asks in chunks of the limit from its first request, with no refusal,
    says where the limit came from once, and run.json records it as an earlier run's."""
    corpus, want, positions = clean
    out, cache = tmp_path / "out", tmp_path / "cache"
    max_n = SERVERS[kind]["max_n"]
    with _server(kind, delay=0.3) as srv:
        argv = _argv(corpus, out, cache, srv.base_url)
        # a chunk of the limit is asked only once the limit is known (a short answer's
        # follow-up asks for all that is missing; the first request for all ENDINGS)
        rc, err = run_until_sigterm(argv, Stop(lambda: any(r.status == 200 and r.body["n"] <= max_n
                                                           for r in _gen(srv))))
        assert rc == 130, err
        answered = positions.kept(srv, max_n, cache)
        _drained(srv)
        srv.delay = 0.0
        assert main(argv) == 0
        err = capsys.readouterr().err
        gens = _gen(srv)
    assert gens and all(r.status == 200 and r.body["n"] <= max_n for r in gens), [
        (r.status, r.body["n"], positions.name(r)) for r in gens]
    assert [a for a in positions.asked(srv) if a in answered] == []
    how = "short answers" if kind == "short answers" else "HTTP 400"
    said = f"answers at most {max_n} choice(s) per request (learned from an earlier run's {how}, kept in the cache)"
    assert err.count(said) == 1 and err.count("choice(s) per request") == 1, err
    (server,) = json.loads((out / "run.json").read_text())["servers"]
    assert server["max_n"] == max_n and server["max_n_from"] == f"an earlier run's {how}, kept in the cache"
    for name in ("positions.jsonl", "stories.csv"):
        assert (out / name).read_bytes() == (want / name).read_bytes(), name


def test_a_server_that_now_says_it_is_vllm_is_not_held_to_what_it_taught_before(tmp_path, capsys):
    """Another server at the same address (vLLM, which takes n whole, where a one-choice
    server was): what the old one taught is not applied, and the cache forgets it."""
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=4)
    out, cache = tmp_path / "out", tmp_path / "cache"
    with _server("short answers") as srv:
        port = srv.port
        assert main(_argv(corpus, out, cache, srv.base_url)) == 0
    capsys.readouterr()
    with Store(cache, readonly=True) as st:
        assert st.get_meta(_taught_name(srv.base_url)) is not None  # kept by the first run
    with LoopbackServer(model="test-gen", owned_by="vllm", port=port) as vllm:
        assert main(_argv(corpus, tmp_path / "out2", cache, vllm.base_url) + ["--refresh", "generation"]) == 0
        gens = _gen(vllm)
    err = capsys.readouterr().err
    assert gens and all(r.body["n"] == ENDINGS for r in gens)
    assert "earlier run" not in err
    with Store(cache, readonly=True) as st:
        kept = json.loads(st.get_meta(_taught_name(vllm.base_url)) or b"{}")
    assert kept.get("max_n") is None


def _taught_name(base_url: str) -> str:
    from tension.core.llm.server_keys import server_key
    from tension.core.run.taught import meta_name

    return meta_name(server_key(base_url), "test-gen")

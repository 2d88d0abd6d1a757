"""M4 of ../shared/reviews/external-servers-2026-12-07.md: seeds that do not hold. With
transformers serve's --continuous-batching a seeded answer depends on what arrived with
it, and FastChat ignores seeds; a seeded run there said nothing and recorded
`batch_invariant: null`, and the README promised reproducible runs.

Now, before the first seeded generation request a run sends to a server whose kind
does not settle it, the run probes the server's seeds once (core/llm/seed_probe.py:
one small request alone, again beside another, and alone once more where they
differ), says a finding other than "held" once on stderr, and records it in run.json
`servers[].seeds`. The probe's requests are marked (the test server's counts leave
them out), never counted as the run's requests, never cached, and what the probe
found is kept in the cache folder, so a rerun does not probe again. Every case runs
against the loopback test server taught the measured behaviour (`seeds="ignored"`,
`seeds="arrival"`, and by default seeds that hold)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import tension
from tension.core.llm.seed_probe import PROBE_HEADER, PROBE_TOKENS
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.openai_server import CHAT_PATH, LoopbackServer
from tension.testing.settings import PROBE_HEADER as SERVER_HEADER

SEED = 7
ENDINGS = 4
# The measured behaviours: the test server's setting, run.json's finding, what stderr says.
NOT_HELD = {"ignored": ("ignored", "ignores seeds"),
            "arrival": ("depend on arrival", "answers a seeded request by what arrives with it")}
SAID = ("ignores seeds", "by what arrives with it")  # any stderr line of the probe's


@pytest.fixture
def corpus(tmp_path) -> Path:
    return make_corpus(tmp_path / "c.jsonl", 2, seed=3)


def _score(srv: LoopbackServer, corpus: Path, tmp_path: Path, name: str, cache: str = "cache", **kw):
    s = tension.score(corpus, out=tmp_path / name, base_url=srv.base_url, model="test-gen",
                      cache=str(tmp_path / cache), progress=False, report=False,
                      **{"seed": SEED, "endings": ENDINGS, **kw}).summary
    return s, json.loads((tmp_path / name / "run.json").read_text())


def _said(err: str) -> int:
    return sum(err.count(s) for s in SAID)


@pytest.mark.parametrize("seeds", sorted(NOT_HELD))
def test_a_server_whose_seeds_do_not_hold_is_said_once_and_recorded(seeds, corpus, tmp_path, capsys):
    found, said = NOT_HELD[seeds]
    # `delay`: requests sent together overlap in the server, as in a batch
    with LoopbackServer(model="test-gen", seeds=seeds, delay=0.02) as srv:
        s, rec = _score(srv, corpus, tmp_path, "out")
        probes, counted = srv.probes, srv.count()
    err = capsys.readouterr().err
    assert s.status == "complete", s.error
    assert err.count(said) == 1 and _said(err) == 1, err
    assert "--seed" in err and "run.json `servers[].seeds`" in err
    (server,) = rec["servers"]
    assert (server["seeds"], server["seeds_from"], server["probe_requests"]) == (found, "a probe of 4 requests", 4)
    if seeds == "arrival":
        assert server["batch_invariant"] is False
    # the probe: small requests of the run's own kind, marked, and in no count of the run's
    assert len(probes) == 4 and all(p.path == CHAT_PATH and p.kind == "generation" for p in probes)
    assert all(p.body["n"] == 1 and p.body["max_tokens"] == PROBE_TOKENS and p.body["seed"] is not None
               for p in probes)
    assert rec["http"]["attempts"] == counted


def test_seeds_that_hold_on_a_server_of_kind_other_are_recorded_and_not_said(corpus, tmp_path, capsys):
    """The loopback server's default (owned_by "test": an OpenAI-compatible server of no
    known kind) holds seeds: the probe's 3 requests find it, stderr says nothing of it,
    and the run's own requests and counts are those of a run that sent no probe."""
    with LoopbackServer(model="test-gen") as srv:
        s, rec = _score(srv, corpus, tmp_path, "out")
        probes, counted, gens = srv.probes, srv.count(), srv.count(CHAT_PATH, kind="generation")
    err = capsys.readouterr().err
    assert s.status == "complete", s.error
    assert _said(err) == 0, err
    (server,) = rec["servers"]
    assert (server["kind"], server["seeds"], server["probe_requests"]) == ("other", "held", 3)
    assert server["batch_invariant"] is True
    assert len(probes) == 3 and srv.count(probes=True) == counted + 3
    assert rec["http"]["attempts"] == counted
    assert gens == rec["requests"]["generation"]  # one request per position: n honoured, no probe among them


def test_a_rerun_does_not_probe_again(corpus, tmp_path, capsys):
    """A fully cached rerun sends nothing, the probe included; a rerun that sends new
    seeded generation requests into the same cache takes the finding the cache kept,
    says it again, and probes nothing."""
    with LoopbackServer(model="test-gen", seeds="ignored") as srv:
        first, _ = _score(srv, corpus, tmp_path, "a")
        assert first.status == "complete", first.error
        assert len(srv.probes) == 4
        srv.reset_records()
        capsys.readouterr()
        again, rec = _score(srv, corpus, tmp_path, "a")
        assert again.status == "complete", again.error
        assert srv.count(probes=True) == 0  # nothing at all
        assert _said(capsys.readouterr().err) == 0  # nothing sent: nothing to say
        more, rec = _score(srv, corpus, tmp_path, "b", endings=ENDINGS + 2)  # new requests, same cache
        probes, gens = srv.probes, srv.count(CHAT_PATH, kind="generation")
    err = capsys.readouterr().err
    assert more.status == "complete", more.error
    assert probes == [] and gens > 0
    assert err.count("ignores seeds") == 1, err
    (server,) = rec["servers"]
    assert (server["seeds"], server["seeds_from"], server["probe_requests"]) == (
        "ignored", "an earlier run's probe, kept in the cache", 0)


def test_a_refresh_of_the_generation_probes_again(corpus, tmp_path, capsys):
    """`--refresh generation` asks the endings again: their server's seeds are probed again
    (it may have been restarted with other settings), and the new finding kept."""
    with LoopbackServer(model="test-gen", seeds="ignored") as srv:
        first, _ = _score(srv, corpus, tmp_path, "a")
        assert first.status == "complete" and len(srv.probes) == 4, first.error
        srv.reset_records()
        again, rec = _score(srv, corpus, tmp_path, "a", refresh="generation")
        probes = len(srv.probes)
    assert again.status == "complete", again.error
    assert probes == 4
    (server,) = rec["servers"]
    assert (server["seeds"], server["probe_requests"]) == ("ignored", 4), server


def test_unseeded_and_greedy_runs_send_no_probe(corpus, tmp_path, capsys):
    """An unseeded request's seed decides nothing, nor a greedy one's (temperature 0)."""
    with LoopbackServer(model="test-gen", seeds="ignored") as srv:
        unseeded, rec = _score(srv, corpus, tmp_path, "u", seed=None)
        greedy, rec0 = _score(srv, corpus, tmp_path, "g", temperature=0.0)
        probes = srv.probes
    assert unseeded.status == "complete" and greedy.status == "complete"
    assert probes == [] and _said(capsys.readouterr().err) == 0
    assert rec["servers"][0]["seeds"] is None and rec0["servers"][0]["seeds"] is None


@pytest.mark.parametrize("server, found", [({"batching": True}, "held"), ({"dialect": "llamacpp"}, "depend on arrival")])
def test_a_kind_that_settles_it_is_not_probed(server, found, corpus, tmp_path):
    """vLLM (owned_by vllm) holds seeds; llama.cpp's batched decoding does not (said with
    its kind already): their kind settles it, and no probe is sent."""
    with LoopbackServer(model="test-gen", seeds="ignored", **server) as srv:
        s, rec = _score(srv, corpus, tmp_path, "out")
        probes = srv.probes
    assert s.status == "complete", s.error
    assert probes == []
    (sv,) = rec["servers"]
    assert (sv["seeds"], sv["seeds_from"], sv["probe_requests"]) == (found, "its kind", 0)


def test_probe_requests_carry_the_header_and_take_no_planted_fault(corpus, tmp_path):
    """The probe is marked on the wire (a proxy's log can tell it), and the test
    server's planted faults stay for the run's requests, which retry them as before."""
    with LoopbackServer(model="test-gen") as srv:
        srv.fail_next("500", times=2)
        s, rec = _score(srv, corpus, tmp_path, "out")
        probes, failed = srv.probes, [r for r in srv.requests if r.status == 500]
    assert s.status == "complete", s.error
    assert len(probes) == 3 and all(p.status == 200 for p in probes)
    assert len(failed) == 2 and rec["http"]["retries"] == 2
    assert PROBE_HEADER == SERVER_HEADER  # the mark the test server reads is the one the tool sends


def test_the_servers_behind_a_router_are_probed_each_and_directly(loopback_servers, corpus, tmp_path, capsys):
    """`--base-url A,B` puts vllm-router in front of both: each server behind it is probed
    directly (the router's count of a server's requests then holds the run's alone), a
    server that ignores seeds is named, and the router's record takes the worst finding."""
    (held,) = loopback_servers(1, model="test-gen")
    (ignores,) = loopback_servers(1, model="test-gen", seeds="ignored")
    s = tension.score(corpus, out=tmp_path / "out", base_url=f"{held.base_url},{ignores.base_url}",
                      model="test-gen", cache=str(tmp_path / "cache"), endings=ENDINGS, progress=False,
                      report=False, seed=SEED).summary
    err = capsys.readouterr().err
    assert s.status == "complete", s.error
    assert err.count("ignores seeds") == 1 and f"{ignores.base_url} ignores seeds" in err, err
    rec = json.loads((tmp_path / "out" / "run.json").read_text())
    seeds = {sv["url"]: (sv["seeds"], sv["probe_requests"]) for sv in rec["servers"]}
    assert seeds[held.base_url] == ("held", 3) and seeds[ignores.base_url] == ("ignored", 4)
    router = [sv for sv in rec["servers"] if sv["url"] not in (held.base_url, ignores.base_url)]
    assert [(sv["seeds"], sv["probe_requests"]) for sv in router] == [("ignored", 0)]  # sent nothing itself
    assert len(held.probes) == 3 and len(ignores.probes) == 4
    for g, srv in zip(rec["replicas"]["generation"], (held, ignores)):
        assert g["requests"] == sum(1 for r in srv.requests if r.status == 200 and r.path in (CHAT_PATH, "/tokenize"))


def test_the_test_servers_arrival_seeds_and_probe_records():
    """The test server's model of the measured behaviours: with `seeds="arrival"` a seeded
    generation request answers alone as alone, and otherwise in company; a request with
    the probe's header is recorded apart and takes neither a planted fault nor a script."""
    messages = [{"role": "system", "content": "You are a fiction writer. Write only story text."},
                {"role": "user", "content": "A ferry left."}]

    async def send(srv: InProcessServer, seed: int, headers: dict[str, str] | None = None) -> tuple[int, str]:
        body = json.dumps({"model": "test-gen", "messages": messages, "n": 1, "seed": seed, "max_tokens": 16})
        reply = await srv.send("POST", srv.base_url + CHAT_PATH, body.encode(), headers)
        ok = reply.status == 200
        return reply.status, json.loads(reply.body)["choices"][0]["message"]["content"] if ok else ""

    async def go() -> None:
        srv = InProcessServer("test-gen", seeds="arrival", delay=0.01)
        alone = [await send(srv, 5), await send(srv, 5)]
        together = await asyncio.gather(send(srv, 5), send(srv, 6))
        assert alone[0] == alone[1] != together[0]
        srv.fail_next("500")
        srv.script("A ferry left.", "scripted")
        assert await send(srv, 5, {SERVER_HEADER: "seeds"}) == alone[0]  # no fault taken, no script
        assert len(srv.probes) == 1 and srv.count() == 4 and srv.count(probes=True) == 5
        assert (await send(srv, 5))[0] == 500  # the fault was the run's next request's
        assert await send(srv, 5) == (200, "scripted")

    asyncio.run(go())

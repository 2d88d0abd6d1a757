"""Misnumbered choices on every answer path (issue 36 item 2; review 2026-12-02 F4,
F5): a server or proxy whose choices carry wrong `index` values (all 0, one
repeated, one out of range, one missing) must never scramble endings or verdicts
without a word. On each path (chat, follow-ups completing short answers, the
batched judge path over /v1/completions, streamed answers) the run's verdicts are
a clean run's, or the failure is reported: never a silent scramble.

The loopback server's `misnumber=` knob (tests/testing/openai_server.py
`MISNUMBERINGS`) renumbers its answers' choices, each text in place."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.errors import ServerError
from tension.core.llm.client import Client
from tension.core.llm.protocol import ChatRequest
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, COMPLETIONS_PATH, MISNUMBERINGS, LoopbackServer

MODELS = ["test-gen", "test-judge"]
COMPARED = ("positions.jsonl", "stories.csv")


def _score(srv: LoopbackServer, tmp: Path, name: str, *extra: str) -> int:
    corpus = tmp / "corpus.jsonl"
    if not corpus.exists():
        make_corpus(corpus, 1, seed=11)
    return main(["score", str(corpus), "--out", str(tmp / name), "--base-url", srv.base_url, "--model", "test-gen",
                 "--judge-model", "test-judge", "--endings", "4", "--seed", "5", "--no-progress", "--no-report",
                 "--retries", "2", "--cache", str(tmp / f"{name}.lmdb"), *extra])


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The reference: the same command on a server that numbers its choices well."""
    tmp = tmp_path_factory.mktemp("clean")
    with LoopbackServer(model=MODELS) as srv:
        assert _score(srv, tmp, "clean", "--judge-batch", "off") == 0
    return tmp


def _same_as_clean(clean: Path, tmp: Path, name: str) -> None:
    for f in COMPARED:
        assert (tmp / name / f).read_bytes() == (clean / "clean" / f).read_bytes(), f


def _reported(err: str) -> bool:
    """The failure names the misnumbering (core/llm/answer_checks.py `misnumbered`)."""
    return "choice indexes" in err or "choices for" in err


@pytest.mark.parametrize("mode", MISNUMBERINGS)
def test_a_chat_server_misnumbering_its_choices_fails_the_run_with_the_reason(clean, tmp_path, capsys, mode):
    """Chat (the generation's n = 4 endings): the answer is unreadable, retried as
    such, and the run fails saying why; it never ends 0 with other numbers."""
    (tmp_path / "corpus.jsonl").write_bytes((clean / "corpus.jsonl").read_bytes())
    with LoopbackServer(model=MODELS, misnumber=mode, misnumber_paths=(CHAT_PATH,)) as srv:
        rc = _score(srv, tmp_path, "run", "--judge-batch", "off")
    err = capsys.readouterr().err
    assert rc == 1, err
    assert _reported(err) and "unreadable answer" in err, err
    assert "Traceback" not in err
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "failed" or run["stories"]["failed"], run


@pytest.mark.parametrize("mode", MISNUMBERINGS)
def test_follow_ups_of_a_server_that_answers_few_choices_are_checked_too(clean, tmp_path, capsys, mode):
    """A server that answers at most 2 choices (chunks and follow-ups complete the
    4): each partial answer is checked as a whole one. The verdicts are the clean
    run's (a leftover short answer numbered 0 … k − 1 is completed), or the run
    fails saying why."""
    (tmp_path / "corpus.jsonl").write_bytes((clean / "corpus.jsonl").read_bytes())
    with LoopbackServer(model=MODELS, max_n=2, misnumber=mode, misnumber_paths=(CHAT_PATH,)) as srv:
        rc = _score(srv, tmp_path, "run", "--judge-batch", "off")
    err = capsys.readouterr().err
    if rc == 0:
        _same_as_clean(clean, tmp_path, "run")
    else:
        assert rc == 1 and _reported(err), err
    assert "Traceback" not in err
    if mode != "missing":  # misnumbered chunks cannot be completed into the clean answer
        assert rc == 1, err


@pytest.mark.parametrize("mode", MISNUMBERINGS)
def test_a_misnumbered_batched_answer_falls_back_to_chat_said_once(clean, tmp_path, capsys, mode):
    """The batched judge path (review F4: verdicts misassigned at 9 of 15 positions,
    exit 0): the answer is not used, the role goes to chat requests for the rest of
    the run, said once, and the verdicts are the clean run's."""
    (tmp_path / "corpus.jsonl").write_bytes((clean / "corpus.jsonl").read_bytes())
    with LoopbackServer(model=MODELS, batching=True, misnumber=mode, misnumber_paths=(COMPLETIONS_PATH,)) as srv:
        rc = _score(srv, tmp_path, "run")
        batched = srv.count(path=COMPLETIONS_PATH)
        judged = srv.count(kind="judge")
    err = capsys.readouterr().err
    assert rc == 0, err
    _same_as_clean(clean, tmp_path, "run")
    assert err.count("one chat request per prompt from now on") == 1, err
    assert "numbered the choices of a batched answer wrongly" in err
    assert batched >= 1 and judged > 0
    why = json.loads((tmp_path / "run" / "run.json").read_text())["judge_batch"]["why_not"]
    assert "numbered the choices of a batched answer wrongly" in why


def test_judge_batch_on_stops_at_a_misnumbered_batched_answer_with_the_way_out(clean, tmp_path, capsys):
    (tmp_path / "corpus.jsonl").write_bytes((clean / "corpus.jsonl").read_bytes())
    with LoopbackServer(model=MODELS, batching=True, misnumber="zero", misnumber_paths=(COMPLETIONS_PATH,)) as srv:
        rc = _score(srv, tmp_path, "run", "--judge-batch", "on")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--judge-batch on:" in err and "numbered the choices of a batched answer wrongly" in err
    assert "use --judge-batch auto or off" in err and "Traceback" not in err


def _stream(srv: LoopbackServer, n: int) -> list[str]:
    async def go() -> list[str]:
        async with Client() as client:
            req = ChatRequest(model="test-gen", n=n, seed=3, max_tokens=64, temperature=1.0,
                              messages=[{"role": "system", "content": "You are a fiction writer."},
                                        {"role": "user", "content": "Continue: the ferry left."}])
            return (await client.chat_stream(client.server(srv.base_url), req)).texts

    return asyncio.run(go())


@pytest.mark.parametrize("mode", MISNUMBERINGS)
def test_a_misnumbered_streamed_answer_is_reported_not_merged(mode):
    """Streamed answers (bench's time-to-first-token request): never retried, so a
    misnumbered stream is reported as such instead of texts merged or lost."""
    with LoopbackServer(model=MODELS) as srv:
        good = _stream(srv, 4)
        srv.misnumber = mode
        with pytest.raises(ServerError, match="misnumbered"):
            _stream(srv, 4)
    assert len(good) == 4 and all(good) and len(set(good)) == 4


def test_behind_the_router_a_worker_misnumbering_its_choices_is_taken_out(clean, tmp_path, capsys):
    """Chat behind vllm-router: the misnumbered answer is unreadable, so before its
    retry every worker is asked the request made small (two choices, so that the
    numbering shows); the worker that misnumbers is taken out and the run ends on
    the other with the clean verdicts. The bad worker numbers one choice out of range,
    so that every answer of its is misnumbered, a judge's single choice too: which of
    the two workers the router sends the story's generation requests to depends on
    the ports' hash, and the test must not (a one-choice answer numbered 0 is right)."""
    (tmp_path / "corpus.jsonl").write_bytes((clean / "corpus.jsonl").read_bytes())
    with (LoopbackServer(model=MODELS) as good,
          LoopbackServer(model=MODELS, misnumber="out_of_range", misnumber_paths=(CHAT_PATH,)) as bad):
        corpus = tmp_path / "corpus.jsonl"
        rc = main(["score", str(corpus), "--out", str(tmp_path / "run"), "--base-url",
                   f"{good.base_url},{bad.base_url}", "--model", "test-gen", "--judge-model", "test-judge",
                   "--endings", "4", "--seed", "5", "--no-progress", "--no-report", "--judge-batch", "off",
                   "--cache", str(tmp_path / "run.lmdb")])
    err = capsys.readouterr().err
    assert rc == 0, err
    _same_as_clean(clean, tmp_path, "run")
    assert f"server {bad.base_url} sent an unreadable answer (HTTP 200 with an unreadable body (choice indexes " \
        in err and "taken out of vllm-router" in err, err


def test_choices_without_an_index_are_read_in_the_order_sent_and_one_missing_index_is_not():
    """A server that sends no `index` at all is read as before (the order sent); one
    that numbers some choices and not others is misnumbered."""
    import msgspec

    from tension.core.llm.protocol import ChatResponse

    dec = msgspec.json.Decoder(ChatResponse)
    plain = dec.decode(b'{"choices": [{"message": {"content": "a"}}, {"message": {"content": "b"}}]}')
    assert [(c.index, c.message.content) for c in plain.choices] == [(0, "a"), (1, "b")]
    with pytest.raises(msgspec.ValidationError, match="choice indexes"):
        dec.decode(b'{"choices": [{"message": {"content": "a"}, "index": 0}, {"message": {"content": "b"}}]}')

"""The cached rerun's fast path: keys encoded from the request Struct, judge texts
built from a position's shared head and tail, and the judged-position records
(one LMDB lookup per position instead of n verdict keys). Every output must be
the same bytes whichever path served it, and a rerun sends nothing."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import lmdb
import msgspec
import pytest

import tension
from tension.cache import records
from tension.cache.keys import request_key
from tension.cache.store import Store
from tension.core.llm.protocol import ChatRequest
from tension.core.prompts import score as prompts
from tension.testing.corpus import make_corpus

N = 6
OUTPUTS = ("positions.jsonl", "stories.csv", "groups.csv", "meta.jsonl", "texts.jsonl")

# --- keys: the Struct encodes to the bytes of its to_builtins dict --------------

_sorted = msgspec.msgpack.Encoder(order="sorted")


def old_key(kind: str, req: ChatRequest) -> bytes:
    """The key as it was computed before: a dict copy, then the sorted msgpack."""
    return b"\x01" + hashlib.blake2b(_sorted.encode([kind, msgspec.to_builtins(req)]), digest_size=16).digest()


def random_request(rng: random.Random) -> ChatRequest:
    def text() -> str:
        alphabet = "abc XYZ{}\u2014\u201c\u00e9\U0001f600\n\"\\"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))

    def maybe(value):
        return value if rng.random() < 0.5 else None

    return ChatRequest(
        model=rng.choice(["test-gen", "Qwen/Qwen3-32B", ""]),
        messages=[{"role": r, "content": text()} for r in rng.sample(["system", "user", "assistant"], rng.randint(0, 3))],
        n=rng.choice([1, 6, 100]),
        temperature=maybe(rng.choice([0, 0.0, 1.2, 0.8])), top_p=maybe(0.95), max_tokens=maybe(rng.randint(1, 200)),
        seed=maybe(rng.randint(-5, 2**40)), chat_template_kwargs=maybe({"enable_thinking": False, "a": [1, "b"]}),
        structured_outputs=maybe({"choice": ["Y", "N"]}), logprobs=maybe(rng.random() < 0.5),
        top_logprobs=maybe(20), stream=maybe(True), stream_options=maybe({"include_usage": True}))


def test_struct_keys_equal_the_old_dict_keys_on_many_requests():
    rng = random.Random(3)
    for _ in range(500):
        req = random_request(rng)
        assert request_key("chat", req) == old_key("chat", req) == request_key("chat", req.key_fields())


def test_golden_keys_are_unchanged():
    # Hex digests computed with the code before this change (to_builtins + sorted msgpack + blake2b).
    judge = ChatRequest(model="test-gen", messages=prompts.judge_messages("The anchor.", "What follows.", "An end."),
                        n=1, temperature=0.0, max_tokens=10, chat_template_kwargs={"enable_thinking": False})
    gen = ChatRequest(model="test-gen", messages=prompts.ending_messages("Once upon a time."), n=100,
                      temperature=1.2, top_p=0.95, max_tokens=150, seed=7)
    assert request_key("chat", judge) == old_key("chat", judge)
    assert request_key("chat", gen) == old_key("chat", gen)
    assert request_key("chat", judge).hex() == GOLDEN_JUDGE
    assert request_key("chat", gen).hex() == GOLDEN_GEN


GOLDEN_JUDGE = "0176580539098d540ead2e085cddf4ec3b"
GOLDEN_GEN = "011fb1a5278c7426119d473e27e86f69d9"


# --- judge texts from a position's head and tail ---------------------------------

@pytest.mark.parametrize("anchor,cont,ending", [
    ("He left.", "The door shut behind him and the rain went on.", "He returns home."),
    ("", "", ""),
    ("A {ending} anchor with {braces}.", "A {continuation} {0} }{ text.", "An {anchor} ending {}."),
    ("\u201cWho?\u201d she asked \u2014 twice.", "caf\u00e9 " * 500, "\U0001f600\n\nTwo lines."),
])
def test_judge_text_from_parts_equals_the_formatted_template(anchor, cont, ending):
    head, tail = prompts.judge_parts(anchor, cont)
    assert prompts.judge_messages_from_parts(head, tail, ending) == prompts.judge_messages(anchor, cont, ending)
    assert tail.endswith("Judgment:") and "{" not in prompts.JUDGE_USER.split("{anchor} {ending}")[1]


# --- end to end: cold run, rerun from the position records, fallback ------------

def cfg_for(srv, tmp_path, **kw):
    base = {"base_url": srv.base_url, "model": "test-gen", "cache": str(tmp_path / "cache"), "endings": N,
            "progress": False, "seed": 7, "save_texts": True, "report": False}
    base.update(kw)
    return base  # the API's keywords


def outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in OUTPUTS}


def drop_positions_db(path: Path) -> None:
    env = lmdb.open(str(path), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"positions", txn=txn), delete=True)
    env.close()


@pytest.mark.parametrize("constraint", [None, "logprobs"])
@pytest.mark.in_process
def test_rerun_from_position_records_and_fallback_give_identical_outputs(server, tmp_path, constraint):
    corpus = make_corpus(tmp_path / "c.jsonl", 3, seed=11)
    extra = {"judge_constraint": constraint, "judge_max_tokens": 1} if constraint else {}
    cold = tension.score(corpus, out=tmp_path / "cold", **cfg_for(server, tmp_path, **extra)).summary
    assert cold.status == "complete" and cold.requests["judge"] > 0
    n_positions = cold.positions
    with Store(tmp_path / "cache") as st:
        assert st.stats()["positions"]["entries"] == n_positions
        assert st.counts.writes["positions"] == 0  # this open wrote nothing
    texts = [json.loads(x) for x in (tmp_path / "cold" / "texts.jsonl").read_text().splitlines()]
    assert texts and all(v in ("Y", "N", "") for t in texts for v in t["verdicts"] if v is not None)
    usage_cold = json.loads((tmp_path / "cold" / "run.json").read_text())["usage_all_answers"]

    def rerun(name: str):
        server.reset_records()
        s = tension.score(corpus, out=tmp_path / name, **cfg_for(server, tmp_path, **extra)).summary
        assert s.status == "complete" and server.requests == []
        assert outputs(tmp_path / name) == outputs(tmp_path / "cold")
        run = json.loads((tmp_path / name / "run.json").read_text())
        assert run["usage_all_answers"] == usage_cold
        return s, run

    fast, run = rerun("rerun")
    assert run["cache"]["hits"]["positions"] == n_positions and run["cache"]["misses"]["positions"] == 0
    assert fast.cache_hits["verdicts"] == cold.requests["judge"]  # the records stand for the verdicts

    drop_positions_db(tmp_path / "cache")
    slow, run = rerun("fallback")
    assert run["cache"]["hits"]["positions"] == 0 and run["cache"]["misses"]["positions"] == n_positions
    assert slow.cache_hits["verdicts"] == cold.requests["judge"]
    with Store(tmp_path / "cache") as st:  # the fallback wrote the records again
        assert st.stats()["positions"]["entries"] == n_positions


@pytest.mark.in_process
def test_position_record_is_not_reused_when_the_judge_prompt_changes(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=12)
    first = tension.score(corpus, out=tmp_path / "a", **cfg_for(server, tmp_path)).summary
    server.reset_records()
    other = tension.score(corpus, out=tmp_path / "b", **cfg_for(server, tmp_path, continuation_words=50)).summary
    assert other.status == "complete"
    assert server.count(kind="generation") == 0
    assert server.count(kind="judge") == other.requests["judge"] > 0
    # (positions near a story's end have under 50 words to continue: their prompts, hence records, stay)
    assert other.cache_hits["positions"] < other.positions == first.positions
    fresh = tension.score(corpus, out=tmp_path / "c",
                          **cfg_for(server, tmp_path, continuation_words=50, cache=str(tmp_path / "fresh"))).summary
    assert fresh.status == "complete"
    assert outputs(tmp_path / "b") == outputs(tmp_path / "c")


def test_read_only_open_of_a_cache_without_the_positions_database(tmp_path):
    path = tmp_path / "old.lmdb"
    env = lmdb.open(str(path), max_dbs=8, subdir=True)  # a cache written before "positions" existed
    for name in (b"endings", b"verdicts", b"tokens", b"meta"):
        env.open_db(name)
    env.close()
    with Store(path, readonly=True) as st:
        assert st.get("positions", request_key("judged", {"x": 1})) is None
        assert st.stats()["positions"] == {"entries": 0, "bytes": 0}
        assert st.counts.misses["positions"] == 1
    with Store(path) as st:  # a writable open adds it
        key = request_key("judged", {"x": 1})
        rec = records.JudgedPosition(texts=["Y", None], usage=records.Usage(requests=1), judged=1, created=1.0)
        st.put_many([("positions", key, rec)])
        assert st.get("positions", key) == rec


# --- per-position helpers a rerun runs for every position: same results as before --

def ref_parse_verdict(text):
    t = (text or "").strip().upper()
    return t.startswith("Y"), not (t.startswith("Y") or t.startswith("N"))


def ref_continuation(sentences, k, max_words):
    text = " ".join(sentences[k:])
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words])


def test_parse_verdict_equals_the_whole_string_reference():
    rng = random.Random(5)
    alphabet = ["y", "Y", "n", "N", " ", "\n", "\t", "\u00a0", "\u0149", "\u00df", "\u1e8f", "x", "\u0345", "es", "o"]
    cases = [None, "", " ", "Y", "n", " yes", "\u0149o", "\u00dfY", "\u1e8f"]
    cases += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(3000)]
    for text in cases:
        assert prompts.parse_verdict(text) == ref_parse_verdict(text), repr(text)


def test_continuation_text_equals_the_full_split_reference():
    from tension.core.inputs.segment import continuation_text

    rng = random.Random(6)
    for _ in range(800):
        sents = ["".join(rng.choice("ab  \n\t.\u2003") for _ in range(rng.randint(0, 30))) for _ in range(rng.randint(1, 8))]
        k = rng.randint(0, len(sents))
        m = rng.randint(0, 25)
        assert continuation_text(sents, k, m) == ref_continuation(sents, k, m)

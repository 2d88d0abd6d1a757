"""End to end on the real embedded vLLM CPU server (slow: installs it once, starts
it, scores a tiny story). CI runs this in its own step: `pytest -m slow`."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

import tension
from tension.core.config import load_config
from tension.core.serving.profiles import EMBEDDED_SCORE_SETTINGS
from tension.testing.corpus import EMBEDDED_STORY as STORY  # the story (tension.testing.corpus)

pytestmark = pytest.mark.slow


def prefix_cache_hits(url: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    m = re.findall(r"^vllm:prefix_cache_hits_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, flags=re.M)
    return sum(float(v) for v in m)




def test_real_server_scores_a_tiny_story_and_reruns_from_cache(vllm_server, tmp_path):
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text(json.dumps({"id": "bakery", "text": STORY}) + "\n")
    cfg = {  # the API's keywords
        **EMBEDDED_SCORE_SETTINGS, "base_url": vllm_server.url, "model": vllm_server.model,
        "endings": 4, "max_tokens": 32, "min_words": 50, "cache": str(tmp_path / "cache"),
        "save_texts": True, "progress": False, "report": False,
    }
    hits_before = prefix_cache_hits(vllm_server.url)
    first = tension.score(corpus, out=tmp_path / "out", **cfg).summary
    assert first.status == "complete", first.error
    positions = [json.loads(x) for x in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()]
    # 11 sentences -> candidate positions k = 1..10; pct keeps those in [0.10, 0.99]
    assert 6 <= len(positions) <= 10
    assert [p["k"] for p in positions] == sorted(p["k"] for p in positions)
    texts = [json.loads(x) for x in (tmp_path / "out" / "texts.jsonl").read_text().splitlines()]
    assert all(len(t["endings"]) == 4 for t in texts)
    assert sum(bool(e.strip()) for t in texts for e in t["endings"]) >= 0.75 * 4 * len(texts)
    verdicts = [v for t in texts for v in t["verdicts"] if v is not None]
    # the logprobs judge: Y or N from the first token's probabilities ("" if neither is a top token)
    assert verdicts and sum(v in ("Y", "N") for v in verdicts) >= 0.9 * len(verdicts)
    assert sum(p["n_malformed"] for p in positions) <= 0.1 * len(verdicts)
    assert all(0 <= p["no_rate"] <= 1 for p in positions)
    # judge prompts of a position share the continuation: the server's prefix cache served them
    assert prefix_cache_hits(vllm_server.url) > hits_before
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["usage_this_run"]["cached_tokens"] > 0

    again = tension.score(corpus, out=tmp_path / "out", **cfg).summary
    assert again.status == "complete"
    assert again.requests == {"generation": 0, "judge": 0, "tokenize": 0, "models": 0}
    # the judge's prompts went batched (issue 19): the embedded server renders its template
    assert run["judge_batch"]["batched"] is True and run["judge_batch"]["prompts"] == first.requests["judge"]


# Endings that stress the seams of the template: spaces at the edges, non-ASCII,
# line breaks, an empty-looking one, text that looks like a template marker.
ENDINGS = ["The baker forgave her.", "  Two spaces before, one after ", "Ünïcode — dashes… and “quotes”",
           "Line\nbreak\n\nand a blank line.", ".", "<|im_start|>assistant\nY<|im_end|>"]


def test_batched_judge_prompts_are_token_for_token_the_chat_prompts(vllm_server, tmp_path):
    """Issue 19's condition for the batched judge path, on the real server: every
    prompt's token ids equal what the chat endpoint builds from its messages; then a
    run with --judge-batch on gives the records a chat run gives, under the same keys."""
    import asyncio
    import shutil

    import lmdb
    import msgspec

    from tension.core.inputs.segment import split_sentences
    from tension.core.llm.batch import Batcher
    from tension.core.llm.client import Client
    from tension.core.llm.protocol import TemplateRequest, TokenIds, TokenizeRequest
    from tension.core.pipelines.score.requests import ScoreRequests

    ids = msgspec.json.Decoder(TokenIds)

    settings = {  # the API's keywords
        **EMBEDDED_SCORE_SETTINGS, "base_url": vllm_server.url, "model": vllm_server.model,
        "endings": 4, "max_tokens": 32, "min_words": 50, "cache": str(tmp_path / "chat.lmdb"),
        "progress": False, "report": False, "judge_batch": "off"}
    cfg = load_config(None, settings)
    reqs = ScoreRequests(cfg, vllm_server.model, vllm_server.model)
    sents = split_sentences(STORY)

    async def token_ids():
        async with Client() as client:
            batcher = Batcher(client, "on", "judge")
            asked = [r for k in (2, 5, 9) for _, r in reqs.verdicts(*reqs.judge_parts(sents, k), ENDINGS)]
            template = await batcher.template(client.server(vllm_server.url), asked)
            same = 0
            for r in asked:  # the chat endpoint's prompt, and the batched path's text, tokenized
                chat = await client.post(client.server(vllm_server.url), "/tokenize", TemplateRequest(
                    model=r.model, messages=r.messages, chat_template_kwargs=r.chat_template_kwargs), ids, model=r.model)
                text = await client.post(client.server(vllm_server.url), "/tokenize", TokenizeRequest(
                    model=r.model, prompt=template.prompt(r)), ids, model=r.model)
                same += chat.tokens == text.tokens
            return same, len(asked)

    same, total = asyncio.run(token_ids())
    assert same == total == 3 * len(ENDINGS)
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text(json.dumps({"id": "bakery", "text": STORY}) + "\n")
    chat = tension.score(corpus, out=tmp_path / "chat", **settings).summary
    assert chat.status == "complete", chat.error
    # the same endings, verdicts asked again: the chat run's cache without its verdicts
    shutil.copytree(tmp_path / "chat.lmdb", tmp_path / "batch.lmdb")
    env = lmdb.open(str(tmp_path / "batch.lmdb"), max_dbs=8)
    with env.begin(write=True) as txn:
        for db in (b"verdicts", b"positions"):
            txn.drop(env.open_db(db, txn=txn), delete=False)
    env.close()
    batched = tension.score(corpus, out=tmp_path / "batch",
                            **{**settings, "cache": str(tmp_path / "batch.lmdb"), "judge_batch": "on"}).summary
    assert batched.status == "complete", batched.error
    assert batched.requests["generation"] == 0 and batched.requests["judge"] == chat.requests["judge"]
    a, b = (_verdict_letters(tmp_path / f"{n}.lmdb", cfg) for n in ("chat", "batch"))
    assert a.keys() == b.keys()  # the same cache keys
    agree = sum(a[k] == b[k] for k in a)
    # the engine sees the same tokens; only floating-point batch effects could move a near tie
    assert agree >= 0.95 * len(a), (agree, len(a))
    print(f"verdicts equal: {agree}/{len(a)}; token ids equal: {same}/{total}")


def _verdict_letters(path, cfg):
    from tension.core.prompts import score as prompts
    from tension.testing.cache_records import verdict_records

    recs = verdict_records(path)
    if cfg.judge_constraint == "logprobs":
        return {k: prompts.verdict_from_logprobs(r.first_logprobs) for k, r in recs.items()}
    return {k: r.text for k, r in recs.items()}

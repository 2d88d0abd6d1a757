"""`estimate` against an independent count: positions, requests, prompt tokens as
sent and as a prefix-caching server computes them (a token trie over every prompt
the run would send), cache coverage after a real score run, and the CLI."""

from __future__ import annotations

import json

import pytest
from sigterm import run_until_sigterm

import tension
from tension.core.cli import main
from tension.core.config import load_config
from tension.core.prompts import score as prompts
from tension.testing.corpus import make_corpus, write_unique_corpus
from tension.testing.openai_server import CHAT_PATH, count_tokens

N = 5  # endings per position
E = 7  # words per ending in the independent count (= --ending-tokens)


def independent_count(stories: list[list[str]], cfg) -> dict:
    """Positions from docs/metrics.md 1.1 (pct in whitespace words), the prompts built from
    the prompt texts, tokens = whitespace words; computed = distinct token prefixes."""
    def words(messages):
        return [w for m in messages for w in m["content"].split()]

    gen_sent = judge_sent = 0
    gen_trie: set[int] = set()
    judge_trie: set[int] = set()

    def add(trie, toks):
        h = 0
        for t in toks:
            h = hash((h, t))
            trie.add(h)

    positions = 0
    for sents in stories:
        total = len(" ".join(sents).split())
        for k in range(1, len(sents)):
            if len(sents[k - 1].split()) < cfg.min_anchor_words:
                continue
            pct = len(" ".join(sents[:k]).split()) / total
            if not cfg.pct_min <= pct <= cfg.pct_max:
                continue
            positions += 1
            g = words(prompts.ending_messages(" ".join(sents[:k])))
            gen_sent += len(g)
            add(gen_trie, g)
            cont = " ".join(" ".join(sents[k:]).split()[: cfg.continuation_words])
            for i in range(cfg.endings):
                ending = f"E{i} " + " ".join(["more"] * (E - 1))
                j = words(prompts.judge_messages(sents[k - 1], cont, ending))
                judge_sent += len(j)
                add(judge_trie, j)
    return {"positions": positions, "gen_sent": gen_sent, "gen_computed": len(gen_trie),
            "judge_sent": judge_sent, "judge_computed": len(judge_trie)}


@pytest.mark.parametrize("continuation_words", [2000, 40])
def test_counts_and_tokens_match_an_independent_count(tmp_path, continuation_words):
    stories = write_unique_corpus(tmp_path / "c.jsonl", 3)
    cfg = {"tokenizer": "words", "endings": N, "cache": str(tmp_path / "cache"),
           "progress": False, "min_words": 100, "continuation_words": continuation_words}
    est = tension.estimate(tmp_path / "c.jsonl", **cfg, ending_tokens=E).estimate
    config = load_config(None, cfg)  # the settings the run read, for the independent count
    ref = independent_count(stories, config)
    assert est.positions == ref["positions"] > 50
    assert est.generation_requests == ref["positions"]
    assert est.judge_requests == ref["positions"] * N
    assert est.prompt_tokens["generation"].sent == ref["gen_sent"]
    assert est.prompt_tokens["generation"].computed == ref["gen_computed"]
    assert est.prompt_tokens["judge"].sent == ref["judge_sent"]
    assert est.prompt_tokens["judge"].computed == ref["judge_computed"]
    assert est.output_tokens_max == {"generation": ref["positions"] * N * config.max_tokens,
                                     "judge": ref["positions"] * N * config.judge_max_tokens}
    assert not est.cache_checked  # no --model, a local counter: the server is not asked
    assert est.gpu_hours is None


def test_word_filter_errors_and_empty_corpus(tmp_path):
    p = tmp_path / "c.jsonl"
    make_corpus(p, 2)
    with p.open("a") as f:
        f.write('{"id": "short", "text": "Too short to keep."}\n{"id": 3}\n')
    cfg = {"tokenizer": "words", "cache": str(tmp_path / "cache"), "progress": False}
    est = tension.estimate(p, **cfg).estimate
    assert (est.stories_kept, est.stories_skipped) == (2, 1)
    assert len(est.input_errors) == 1 and "c.jsonl:4" in est.input_errors[0] and "field `id`" in est.input_errors[0]
    q = tmp_path / "none.jsonl"
    q.write_text('{"id": "short", "text": "Too short."}\n')
    est = tension.estimate(q, **cfg).estimate
    assert est.positions == 0 and est.prompt_tokens["generation"].sent == 0
    assert est.prompt_tokens["judge"].computed == 0


def test_cost_formula(tmp_path):
    stories = write_unique_corpus(tmp_path / "c.jsonl", 2)
    cfg = {"tokenizer": "words", "endings": N, "cache": str(tmp_path / "cache"),
           "progress": False, "min_words": 100}
    est = tension.estimate(tmp_path / "c.jsonl",
                           **cfg, gen_tok_s=50.0, judge_req_s=4.0, gpu_hour_usd=3.0, ending_tokens=E).estimate
    p = independent_count(stories, load_config(None, cfg))["positions"]
    gen_h = p * N * E / 50.0 / 3600
    judge_h = p * N / 4.0 / 3600
    assert est.gpu_hours["generation"] == pytest.approx(gen_h)
    assert est.gpu_hours["judge"] == pytest.approx(judge_h)
    assert est.usd == pytest.approx((gen_h + judge_h) * 3.0)


@pytest.mark.in_process
def test_server_counts_and_cache_coverage_match_score(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 3)
    cfg = {"base_url": server.base_url, "model": "test-gen", "endings": N, "seed": 7,
           "cache": str(tmp_path / "cache"), "progress": False}
    before = tension.estimate(corpus, **cfg).estimate
    assert server.count(path=CHAT_PATH) == 0  # no LLM call
    assert before.cache_checked and before.generation_cached == 0 and before.judge_checkable == 0
    tokenize_calls = server.count(path="/tokenize")
    summary = tension.score(corpus, out=tmp_path / "out", **cfg).summary
    assert summary.status == "complete"
    # The token counts estimate asked for are in the cache: score asks none again.
    assert summary.requests["tokenize"] == 0 and tokenize_calls > 0
    gen = [r for r in server.requests if r.kind == "generation"]
    judge = [r for r in server.requests if r.kind == "judge"]
    assert before.positions == summary.positions == len(gen)
    # The test server counts the message contents, as /tokenize does: exact here.
    sent = sum(count_tokens(m["content"]) for r in gen for m in r.body["messages"])
    assert before.prompt_tokens["generation"].sent == sent
    after = tension.estimate(corpus, **cfg).estimate
    assert after.generation_cached == after.generation_requests == len(gen)
    assert after.judge_checkable == after.judge_requests == len(judge)
    assert after.judge_cached == len(judge)
    assert (after.generation_to_send, after.judge_to_send) == (0, 0)


def test_cli_table_json_and_bad_flags(tmp_path, capsys):
    write_unique_corpus(tmp_path / "c.jsonl", 2)
    args = ["estimate", str(tmp_path / "c.jsonl"), "--tokenizer", "words", "--min-words", "100", "--no-progress",
            "--cache", str(tmp_path / "cache"), "--base-url", "http://127.0.0.1:9"]
    assert main(args + ["--gen-tok-s", "100", "--judge-req-s", "10", "--gpu-hour-usd", "2",
                        "--json", str(tmp_path / "e.json")]) == 0
    out = capsys.readouterr().out
    assert "GPU-hours" in out and "formula:" in out and "cost at $2/GPU-hour" in out
    doc = json.loads((tmp_path / "e.json").read_text())
    assert doc["positions"] > 0 and doc["usd"] > 0
    with pytest.raises(SystemExit) as e:  # a usage error of the flag's declared bounds, at parse time
        main(args + ["--gen-tok-s", "-1", "--judge-req-s", "10"])
    assert e.value.code == 2 and "--gen-tok-s" in capsys.readouterr().err
    assert main(args + ["--bench", str(tmp_path / "missing.json")]) != 0


@pytest.mark.in_process
def test_a_server_that_refuses_to_count_is_a_clear_error(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2)
    server.fail_next("503", times=1, path="/tokenize")  # transient: retried, no effect
    args = ["estimate", str(corpus), "--base-url", server.base_url, "--no-progress",
            "--cache", str(tmp_path / "cache")]
    assert main(args + ["--model", "test-gen"]) == 0
    capsys.readouterr()
    # /tokenize would answer 404 for the unknown model: the model is named, not a missing endpoint
    assert main(args + ["--model", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--model nope" in err and "test-gen" in err and "--tokenizer" not in err
    assert server.count(path=CHAT_PATH) == 0


def test_local_tokenizer_counts_prefixes_as_encoding_each_alone(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    stories = write_unique_corpus(tmp_path / "c.jsonl", 3, seed=2)
    # A byte-level BPE trained on the corpus itself (nothing downloaded).
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator([" ".join(s) for s in stories],
                            tokenizers.trainers.BpeTrainer(vocab_size=300, show_progress=False))
    tok.save(str(tmp_path / "tokenizer.json"))
    cfg = {"tokenizer": str(tmp_path / "tokenizer.json"), "endings": N, "progress": False,
           "cache": str(tmp_path / "cache"), "min_words": 100}
    est = tension.estimate(tmp_path / "c.jsonl", **cfg).estimate

    def T(text):
        return len(tok.encode(text, add_special_tokens=False).ids)

    O = T(prompts.ENDING_SYSTEM) + T(prompts.ENDING_USER.format(prefix=""))
    positions = sent = 0
    for sents in stories:
        total = T(" ".join(sents))
        for k in range(1, len(sents)):
            p = T(" ".join(sents[:k]))
            if len(sents[k - 1].split()) >= 10 and 0.10 <= p / total <= 0.99:
                positions += 1
                sent += O + p
    assert est.positions == positions > 50
    assert est.prompt_tokens["generation"].sent == sent


def test_sigterm_stops_estimate_cleanly_and_keeps_the_counts_asked(server, tmp_path):
    from tension.cache.store import Store

    server.slow_seconds = 0.3
    server.fail_next("slow", times=1000, path="/tokenize")
    corpus = make_corpus(tmp_path / "c.jsonl", 3)
    cache = tmp_path / "cache"
    code, err = run_until_sigterm(
        ["estimate", str(corpus), "--base-url", server.base_url, "--model", "test-gen", "--no-progress",
         "--tokenize-concurrency", "4", "--cache", str(cache)],
        lambda: server.count(path="/tokenize") >= 2)
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err
    with Store(cache, readonly=True) as st:
        assert st.stats()["tokens"]["entries"] >= 2  # the counts answered before the stop were committed


@pytest.mark.in_process
def test_an_estimate_is_not_the_caches_last_run(server, tmp_path):
    """`cache stats` shows the last run's hits: an estimate only looks, and leaves them."""
    from tension.cache.store import Store

    corpus = make_corpus(tmp_path / "c.jsonl", 1)
    cfg = {"base_url": server.base_url, "model": "test-gen", "endings": N,
           "cache": str(tmp_path / "cache"), "progress": False, "report": False}
    assert tension.score(corpus, out=tmp_path / "out", **cfg).summary.status == "complete"
    with Store(tmp_path / "cache") as st:
        before = st.last_run_counts()
    assert tension.estimate(corpus, **cfg).estimate.generation_cached > 0
    with Store(tmp_path / "cache") as st:
        assert before is not None and st.last_run_counts() == before

"""run.json `servers[].tokenize` says what counted the tokens for pct (issue 61, L1 of
../shared/reviews/external-servers-2026-12-07.md): it said "vllm" on transformers serve,
a server with no /tokenize, where the model folder's tokenizer.json had counted them.
The loopback server here has no /tokenize either (`serve_tokenize=False`)."""

from __future__ import annotations

import json

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer


def _tokenizer_json(path, corpus) -> str:
    """A byte-level BPE trained on the corpus itself (nothing downloaded)."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    tok.train_from_iterator(texts, tokenizers.trainers.BpeTrainer(vocab_size=300, show_progress=False))
    tok.save(str(path))
    return str(path)


@pytest.mark.parametrize("counter", ["words", "tokenizer.json"])
def test_a_local_tokenizer_is_what_run_json_says_counted(tmp_path, capsys, counter):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    given = counter if counter == "words" else _tokenizer_json(tmp_path / "tok.json", corpus)
    with LoopbackServer(model="test-gen", serve_tokenize=False) as srv:
        rc = main(["score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", srv.base_url,
                   "--cache", str(tmp_path / "cache"), "--endings", "2", "--seed", "1", "--no-progress",
                   "--no-report", "--tokenizer", given])
        asked = srv.count(path="/tokenize")
    assert rc == 0, capsys.readouterr().err
    rec = json.loads((tmp_path / "o" / "run.json").read_text())
    (server,) = rec["servers"]
    assert asked == 0 and rec["requests"].get("tokenize", 0) == 0  # the server counted nothing
    assert server["tokenize"] == counter and rec["config"]["tokenizer"].endswith(("words", "tok.json"))


def test_the_servers_own_count_keeps_its_dialect(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with LoopbackServer(model="test-gen") as srv:
        rc = main(["score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", srv.base_url,
                   "--cache", str(tmp_path / "cache"), "--endings", "2", "--seed", "1", "--no-progress",
                   "--no-report"])
        asked = srv.count(path="/tokenize")
    assert rc == 0, capsys.readouterr().err
    (server,) = json.loads((tmp_path / "o" / "run.json").read_text())["servers"]
    assert asked > 0 and server["tokenize"] == "vllm"

"""The hand-over between `generate --mode whodunit` and `fairplay`: the generated
file is accepted as fairplay input, and the know-it-all reader, told the culprit
(`--know-it-all-culprit given`), continues a story with exactly the prompts the
story was written with."""

from __future__ import annotations

import json
import re

import pytest

from tension.core.cli import main

L = 5


def _paragraph(m, seed, i):
    k = re.search(r"paragraph (\d+) of", m[-1]["content"]).group(1)
    return f"Paragraph {k}: the {{brass}} key (seed {seed}, choice {i})."


@pytest.mark.in_process
def test_whodunit_output_is_fairplay_input_and_the_know_it_all_continues_it_verbatim(server, tmp_path):
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text(json.dumps({"id": "w1", "idea": "A key goes missing from a lighthouse.",
                                 "suspects": ["Ada", "Bo", "Cy"], "culprit": "Bo", "distractor": "Cy"}) + "\n")
    server.script("Continue the story.", _paragraph)
    server.script("Finish the story.", lambda m, seed, i: "At last Bo is named; the key was in his coat.")
    stories = tmp_path / "whodunits.jsonl"
    common = ["--cache", str(tmp_path / "cache"), "--no-progress"]
    assert main(["generate", str(ideas), "--out", str(stories), "--mode", "whodunit", "--paragraphs", str(L),
                 "--base-url", server.base_url, "--model", "test-gen", *common]) == 0
    written = [r.body for r in server.requests if r.kind != "models" and r.path.endswith("/chat/completions")]
    assert len(written) == L
    server.reset_records()
    server.script("reveal at its end as the true culprit", '{"culprit": "Bo"}')  # the culprit judge

    rc = main(["fairplay", str(stories), "--out", str(tmp_path / "fp"), "--readers", "know_it_all",
               "--know-it-all-culprit", "given", "--k", "1", "--schedule", "2", "--reader-base-url", server.base_url, "--reader-model", "test-judge",
               "--max-plots", "0", "--resamples", "200", *common])
    sent = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    # The continuation from checkpoint 2 writes paragraphs 3..L with the story's own
    # system prompt and templates: the same messages, model, temperature and length
    # limit as generate sent for paragraph 3 (only the sampled story so far differs
    # from paragraph 4 on, so compare paragraph 3).
    cont = [b for b in sent if b["model"] == "test-gen"]
    assert len(cont) == L - 2
    first = cont[0]
    assert first["messages"] == written[2]["messages"]
    for field in ("model", "temperature", "max_tokens"):
        assert first[field] == written[2][field], field
    readers = [json.loads(x) for x in (tmp_path / "fp" / "readers.jsonl").read_text().splitlines()]
    (rec,) = readers
    assert rec["id"] == "w1" and rec["L"] == L and rec["culprit"] == "Bo"
    kia = rec["readers"]["know_it_all"]
    assert kia == [None, [0.0, 1.0, 0.0], None, None, None]
    assert rc == 0

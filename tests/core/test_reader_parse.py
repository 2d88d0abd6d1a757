"""The readers' answer parser on a gallery of malformed model answers: what is
repaired (and said), what is an error (the caller re-asks, then records a
failure), and that no number is ever made up. Also the prompt templates."""

from __future__ import annotations

import json

import pytest

from tension.core.prompts import readers as rp
from tension.core.prompts.answers import (
    json_objects,
    match_suspect,
    parse_culprit,
    parse_distribution,
    parse_suspect_list,
)

SUS = ["Mara Quill", "Tobias Fenn", "Ines Harrow", "Old Gus"]
P = [0.1, 0.6, 0.2, 0.1]


def paper(names=SUS, probs=P, **extra) -> str:
    return json.dumps({"suspects": names, "probabilities": probs, **extra})


# (answer, expected probabilities, a word the repair notes must contain or None for a clean parse)
REPAIRED = [
    ("clean paper format", paper(distractor_probabilities=[0, 0, 1, 0]), P, None),
    ("json code fence", "```json\n" + paper() + "\n```", P, None),
    ("the paper's flattened fence", "\u201d\u2019json\n" + paper() + "\n\u201d\u2019", P, None),
    ("prose around the JSON", "Sure! Based on the clues:\n" + paper() + "\nLet me know if you need more.", P, None),
    ("reasoning block first", "<think>Maybe {Mara}? no.</think>" + paper(), P, None),
    ("reordered suspects", paper(names=[SUS[2], SUS[0], SUS[3], SUS[1]], probs=[0.2, 0.1, 0.1, 0.6]), P,
     "reordered"),
    ("renamed: case and spaces", paper(names=["mara  quill", "TOBIAS FENN", "Ines Harrow", "old gus"]), P,
     "read 'mara  quill' as 'Mara Quill'"),
    ("renamed: unique prefix / surname", paper(names=["Mara", "Mr. Fenn", "Harrow", "Old Gus"]), P,
     "read 'Mr. Fenn' as 'Tobias Fenn'"),
    ("sum is not 1", paper(probs=[1, 6, 2, 1]), P, "renormalised"),
    ("percent strings", paper(probs=["10%", "60%", "20%", "10%"]), P, "as a number"),
    ("trailing comma", '{"suspects": ["Mara Quill", "Tobias Fenn", "Ines Harrow", "Old Gus"], '
                       '"probabilities": [0.1, 0.6, 0.2, 0.1],}', P, "trailing commas"),
    ("single-quoted Python dict", str({"suspects": SUS, "probabilities": P}), P, "single-quoted"),
    ("name-keyed object", json.dumps({"probabilities": dict(zip(SUS, P))}), P, None),
    ("top-level name keys", json.dumps({**dict(zip(SUS, P)), "distractor": 0.5}), P, "top level"),
    ("no names, asked order", json.dumps({"probabilities": P}), P, "asked order"),
    ("an extra name with probability 0", json.dumps({"probabilities": {**dict(zip(SUS, P)), "The butler": 0}}),
     P, "dropped 'The butler'"),
]

ERRORS = [
    ("empty", "", "empty answer"),
    ("no JSON at all", "I think it was the gardener.", "no JSON object"),
    ("negative probability", paper(probs=[0.5, -0.1, 0.4, 0.2]), "negative"),
    ("missing suspect", paper(names=SUS[:3], probs=P[:3]), "no probability for 'Old Gus'"),
    ("null probability", paper(probs=[0.1, None, 0.2, 0.7]), "missing"),
    ("not a number", paper(probs=[0.1, "high", 0.2, 0.7]), "is not a number"),
    ("unknown suspect with mass", paper(names=["Mara Quill", "The butler", "Ines Harrow", "Old Gus"]),
     "not one of the suspects"),
    ("same suspect twice", paper(names=["Mara", "Mara Quill", "Ines Harrow", "Old Gus"]), "two answers"),
    ("lengths differ", paper(probs=[0.5, 0.5]), "4 suspects but 2 probabilities"),
    ("all zero", paper(probs=[0, 0, 0, 0]), "all 0"),
    ("NaN", '{"suspects": ["Mara Quill", "Tobias Fenn", "Ines Harrow", "Old Gus"], '
            '"probabilities": [NaN, 0.5, 0.3, 0.2]}', "not finite"),
    ("no probabilities field", json.dumps({"culprit": "Tobias Fenn"}), "no `probabilities`"),
    ("wrong count without names", json.dumps({"probabilities": [0.5, 0.5]}), "2 probabilities for 4 suspects"),
    ("two different answers", paper() + "\nOn reflection:\n" + paper(probs=[0.7, 0.1, 0.1, 0.1]),
     "different probabilities"),
    ("truncated JSON", paper()[:40], "no JSON object"),
]


@pytest.mark.parametrize("label,answer,expected,note", REPAIRED, ids=[r[0] for r in REPAIRED])
def test_repaired(label, answer, expected, note):
    res = parse_distribution(answer, SUS)
    assert res.error is None, res.error
    assert res.probs == pytest.approx(expected, abs=1e-12)
    assert sum(res.probs) == pytest.approx(1.0)
    if note is None:
        assert res.repairs == []
    else:
        assert any(note in r for r in res.repairs), res.repairs


@pytest.mark.parametrize("label,answer,why", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_give_no_numbers(label, answer, why):
    res = parse_distribution(answer, SUS)
    assert res.probs is None
    assert res.error
    if why:
        assert why in res.error, res.error


def test_gallery_size():
    assert len(REPAIRED) + len(ERRORS) >= 15


def test_an_ambiguous_name_is_an_error():
    harrows = ["Ines Harrow", "Jem Harrow", "Old Gus"]
    res = parse_distribution(json.dumps({"probabilities": {"Harrow": 0.5, "Jem Harrow": 0.2, "Gus": 0.3}}), harrows)
    assert res.probs is None and "could be any of 'Ines Harrow', 'Jem Harrow'" in res.error
    idx, why = match_suspect("Harrow", harrows)
    assert idx is None and "could be any of" in why


def test_match_suspect_rules():
    assert match_suspect("ines harrow", SUS) == (2, None)
    assert match_suspect("Tob", SUS) == (1, None)
    assert match_suspect("Baron Fenn", SUS) == (1, None)
    assert match_suspect("Mr. Quill's", SUS) == (0, None)
    assert match_suspect("Gustav", SUS)[0] is None
    assert match_suspect("", SUS)[0] is None


def test_culprit_answers():
    assert parse_culprit('{"culprit": "tobias fenn"}', SUS).index == 1
    assert parse_culprit('```json\n{"Culprit": "Fenn"}\n```', SUS).index == 1
    assert parse_culprit("Ines Harrow.", SUS).index == 2  # a bare name
    nobody = parse_culprit('{"culprit": null}', SUS)
    assert nobody.index is None and nobody.error is None
    assert parse_culprit('{"culprit": "none"}', SUS).error is None
    assert "not one of the suspects" in parse_culprit('{"culprit": "The butler"}', SUS).error
    assert parse_culprit("", SUS).error == "empty answer"
    assert "more than one" in parse_culprit('{"culprit": "Mara"} or {"culprit": "Fenn"}', SUS).error
    assert parse_culprit("The story never says who did it, but I think it was the captain.", SUS).error


def test_suspect_lists():
    assert parse_suspect_list('{"suspects": ["Ann", " Bob ", "ann", "Cy"]}') == (["Ann", "Bob", "Cy"], None)
    assert parse_suspect_list('Here: ["Ann", "Bob"]') == (["Ann", "Bob"], None)
    assert parse_suspect_list('{"suspects": ["Ann"]}')[0] is None
    assert parse_suspect_list("Ann and Bob")[0] is None


def test_json_objects_skip_nested_and_apostrophes():
    values, _ = json_objects("It's {\"a\": {\"b\": 1}} and {\"c\": 2}")
    assert values == [{"a": {"b": 1}}, {"c": 2}]


# --- the prompt templates ---------------------------------------------------------

def test_gullible_prompt_is_the_papers_for_four_suspects():
    (msg,) = rp.gullible_messages(["First.", "Second {i} {story}."], SUS)
    text = msg["content"]
    assert msg["role"] == "user"
    assert text.startswith("I want you to give me likelihood estimates for the true and distracting culprit "
                           "identities in the following story.\nI want lists of four prediction probabilities, "
                           "a value for each of four suspects")
    assert "The suspects are: Mara Quill, Tobias Fenn, Ines Harrow, Old Gus. Please do not change" in text
    assert '"probabilities": [0.0, 0.9, 0.05, 0.05],' in text
    assert "ignoring the interest of the writer. You should estimate the most likely truth, even if is boring." in text
    # the story, paragraphs joined by a blank line; braces in it left alone
    assert text.endswith("## BEGINNING OF STORY ##\n\nFirst.\n\nSecond {i} {story}.\n\n## END OF STORY ##")


def test_experienced_prompt_with_and_without_previous_stories():
    (plain,) = rp.experienced_messages(["A."], ["X", "Y"], 25)
    assert "lists of two prediction probabilities" in plain["content"]
    assert "for a total of 25 paragraphs." in plain["content"]
    assert "PREVIOUS STORIES" not in plain["content"]
    (prev,) = rp.experienced_messages(["A."], ["X", "Y"], 25, ["Old one.", "Old two."])
    t = prev["content"]
    assert "## BEGINNING OF PREVIOUS STORY 1##\n\nOld one.\n\n## END OF PREVIOUS STORY 1##" in t
    assert t.index("PREVIOUS STORY 2") > t.index("PREVIOUS STORY 1")
    assert t.endswith("## BEGINNING OF (PARTIAL) STORY FOR PREDICTION ##\n\nA.\n## END OF (PARTIAL) STORY FOR "
                      "PREDICTION ##")


def test_generator_rendering_is_literal_and_single_pass():
    tpl = "P{i}/{L} [{suspects}] {culprit}|{distractor} {unknown}\n{story}"
    out = rp.render_generator(tpl, i=3, L=25, suspects=["A", "B"], culprit="B", distractor=None,
                              story=["x {L} {i}", "y"])
    assert out == "P3/25 [A, B] B| {unknown}\nx {L} {i}\n\ny"

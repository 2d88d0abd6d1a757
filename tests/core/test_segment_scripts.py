"""The sentence splitter and word counts in every script it supports (README,
"Languages"; docs/metrics.md 1.1), the paper's rule kept on English, and the
warning when a story's terminal marks and its boundaries disagree.

The sample texts are written for this test (short, two to six sentences each)."""

from __future__ import annotations

import json

import pytest

from tension.core.cli import main
from tension.core.inputs.segment import (
    SENTENCE_BOUNDARY,
    boundary_warning,
    candidates,
    split_sentences,
    word_count,
)
from tension.testing.corpus import SHARED_DATA, shared_texts

# (script, text, its sentences exactly, word_count of the text)
SCRIPTS = [
    ("German", "Er ging nach Hause. Über der Stadt lag Nebel. Ärger kam auf! Öfter als sonst? „Komm!“ Dann ging er.",
     ["Er ging nach Hause.", "Über der Stadt lag Nebel.", "Ärger kam auf!", "Öfter als sonst?", "„Komm!“",
      "Dann ging er."], 19),
    ("French", "Il partit. Éric resta seul. À minuit tout changea ! « Viens ! » Puis il se tut. Œdipe dormait.",
     ["Il partit.", "Éric resta seul.", "À minuit tout changea !", "« Viens ! »", "Puis il se tut.",
      "Œdipe dormait."], 20),
    ("Spanish", "Se fue al amanecer. ¿Volvería algún día? ¡Nadie lo sabía! Ángel esperó.",
     ["Se fue al amanecer.", "¿Volvería algún día?", "¡Nadie lo sabía!", "Ángel esperó."], 12),
    ("Polish", "Wrócił do domu. Łódź spała. Źle się czuł. Ślub był jutro.",
     ["Wrócił do domu.", "Łódź spała.", "Źle się czuł.", "Ślub był jutro."], 11),
    ("Russian", "Он пошёл домой. Она ждала его у двери. Всё было тихо! «Кто там?» Ёлка стояла.",
     ["Он пошёл домой.", "Она ждала его у двери.", "Всё было тихо!", "«Кто там?»", "Ёлка стояла."], 15),
    ("Greek", "Πήγε σπίτι. Ήταν αργά. Πού πας; Είπε η μητέρα. Ω, τι ωραία! Ποιος ήρθε\u037e Κανείς.",
     ["Πήγε σπίτι.", "Ήταν αργά.", "Πού πας;", "Είπε η μητέρα.", "Ω, τι ωραία!", "Ποιος ήρθε\u037e",
      "Κανείς."], 15),
    ("Hebrew", "הוא הלך הביתה. היא חיכתה ליד הדלת. מי שם? איש לא ענה!",
     ["הוא הלך הביתה.", "היא חיכתה ליד הדלת.", "מי שם?", "איש לא ענה!"], 12),
    ("Arabic", "ذهب إلى البيت. كانت تنتظره عند الباب. من هناك؟ لا أحد!",
     ["ذهب إلى البيت.", "كانت تنتظره عند الباب.", "من هناك؟", "لا أحد!"], 11),
    ("Hindi", "वह घर गया। वह दरवाज़े पर इंतज़ार कर रही थी। कौन है? कोई नहीं॥ अंत।",
     ["वह घर गया।", "वह दरवाज़े पर इंतज़ार कर रही थी।", "कौन है?", "कोई नहीं॥", "अंत।"], 15),
    # no space after 。！？; a quotation that ends a sentence's clause and goes on (「…。」と) is not cut
    ("Japanese", "彼は家に帰った。夜は静かだった！誰？「行くよ。」と彼は言った。「さようなら。」",
     ["彼は家に帰った。", "夜は静かだった！", "誰？", "「行くよ。」と彼は言った。", "「さようなら。」"], 15),
    ("Chinese", "他回家了。夜很安静！谁在那里？没有人。",
     ["他回家了。", "夜很安静！", "谁在那里？", "没有人。"], 8),
    ("Korean", "그는 집에 갔다. 그녀는 문 앞에서 기다렸다. 누구세요? 아무도 없었다!",
     ["그는 집에 갔다.", "그녀는 문 앞에서 기다렸다.", "누구세요?", "아무도 없었다!"], 10),
    # Thai writes no terminal mark: a space between Thai letters ends a sentence
    ("Thai", "เขากลับบ้านแล้ว คืนนั้นเงียบมาก ไม่มีใครอยู่เลย",
     ["เขากลับบ้านแล้ว", "คืนนั้นเงียบมาก", "ไม่มีใครอยู่เลย"], 12),
    ("Armenian", "Նա գնաց տուն։ Գիշերը հանգիստ էր։",
     ["Նա գնաց տուն։", "Գիշերը հանգիստ էր։"], 6),
    # the paper's own cases stay as they were: no split before a lower-case letter (in any script)
    # or a digit, a split after an abbreviation before a capital
    ("English", "Mr. Smith went home. émile was lower. 3 cats. He slept.",
     ["Mr.", "Smith went home. émile was lower. 3 cats.", "He slept."], 11),
]


@pytest.mark.parametrize(("script", "text", "sentences", "words"), SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_sentences_of_every_supported_script_end_at_its_own_marks(script, text, sentences, words):
    got = split_sentences(text)
    assert got == sentences
    # nothing is lost but the whitespace between sentences
    assert "".join("".join(got).split()) == "".join(text.split())
    assert word_count(text) == words
    assert boundary_warning(text) is None


@pytest.mark.parametrize("text", [s[1] for s in SCRIPTS if s[0] not in ("Japanese", "Chinese", "Thai")],
                         ids=[s[0] for s in SCRIPTS if s[0] not in ("Japanese", "Chinese", "Thai")])
def test_word_count_of_spaced_scripts_is_the_papers_whitespace_count(text):
    assert word_count(text) == len(text.split())


def test_word_count_of_scripts_without_spaces_counts_characters_per_word():
    assert word_count("他回家了") == 2  # 4 Han characters, 2 per word
    assert word_count("他回家了。") == 2  # punctuation is no word
    assert word_count("東京タワー・スカイツリー") == 6  # 11 kana/Han letters, rounded up; the middle dot is none
    assert word_count("ไม่มีใครอยู่เลย") == 4  # 15 Thai characters, 4 per word, rounded up
    assert word_count("彼は 2024 年に Tokyo へ") == 5  # 2024 and Tokyo are words; 4 Han/kana characters 2
    # ... so a Japanese sentence of 20 characters anchors a position, as an English one of 10 words
    assert [c.k for c in candidates(["彼は長い一日の仕事を終えて夜の町を歩いた。", "次。"])] == [1]


def _paper_split(text: str) -> list[str]:
    """docs/metrics.md 1.1's rule as printed, for the comparison below."""
    out, start = [], 0
    for m in SENTENCE_BOUNDARY.finditer(text):
        piece = text[start:m.start() + len(m.group().rstrip())].strip()
        if piece:
            out.append(piece)
        start = m.end()
    return out + ([text[start:].strip()] if text[start:].strip() else [])


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="the shared story data (../shared/data) is not on this machine")
def test_english_stories_split_and_count_exactly_as_the_papers_rule():
    n = 0
    for name, n, text in shared_texts():
        sents = split_sentences(text)
        assert sents == _paper_split(text), (name, n)
        assert word_count(text) == len(text.split())
        assert all(word_count(s) == len(s.split()) for s in sents)
    assert n > 500


def test_many_marks_and_few_boundaries_is_named_with_what_follows_them():
    # British single quotes: the paper's rule does not end a sentence before ‘ (docs/metrics.md 1.1)
    text = " ".join(["‘Good day, Hans.’ ‘Good day.’"] * 8)
    w = boundary_warning(text)
    assert w is not None
    assert w.startswith("16 sentence-ending marks but 0 sentence boundaries (15 of the marks are followed by '‘')")
    # lower-case sentence starts, too
    assert boundary_warning(" ".join(["it rained. it poured."] * 6)) is not None
    # a few marks are not enough to tell
    assert boundary_warning("‘Hi.’ ‘Ho.’ ‘Ha.’") is None


# --- the user's path: score a story in each kind of script ------------------------------------


def _story(sentence: str, n: int) -> str:
    return "".join(sentence.format(i=i) for i in range(n))


STORIES = {
    # 40 sentences of about 34 Han/kana characters (17 words): 680 words, no space in it
    "japanese": _story("彼は長い一日の仕事を終えて静かな夜の町をゆっくりと歩き{i}番目の角で立ち止まった。", 40),
    # 60 sentences of 10 whitespace words in a script without case
    "hebrew": _story("הוא הלך לאט מאוד לאורך הרחוב הארוך והשקט בלילה {i}. ", 60),
    # 60 sentences of 10 words, each opening with a non-ASCII capital
    "german": _story("Über den Dächern der alten Stadt lag dichter Nebel {i}. ", 60),
}


@pytest.mark.in_process
def test_score_finds_positions_in_stories_of_other_scripts(server, tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": v}, ensure_ascii=False) + "\n" for k, v in STORIES.items()),
                      encoding="utf-8")
    capsys.readouterr()
    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url,
               "--model", "test-gen", "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress",
               "--no-report", "--tokenizer", "words"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "3 stories (0 skipped by the word filter)" in out  # the Japanese story is not "1 words"
    rows = [json.loads(x) for x in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()]
    ks = {sid: sorted(r["k"] for r in rows if r["id"] == sid) for sid in STORIES}
    # every sentence anchors a position, within pct 0.10 .. 0.99 of the story
    assert ks["japanese"] == list(range(4, 40))
    assert ks["hebrew"] == list(range(6, 60))
    assert ks["german"] == list(range(6, 60))
    assert "sentence-ending marks" not in err


@pytest.mark.in_process
def test_score_warns_when_a_storys_marks_and_boundaries_disagree(server, tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    text = _story("‘He walked slowly along the long and quiet street, number {i}.’ ", 60)
    corpus.write_text(json.dumps({"id": "quotes", "text": text}) + "\n", encoding="utf-8")
    capsys.readouterr()
    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url,
               "--model", "test-gen", "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress",
               "--no-report", "--tokenizer", "words"])
    _, err = capsys.readouterr()
    assert rc == 1, err  # no position: the one sentence has no boundary
    assert ("warning: story 'quotes': 60 sentence-ending marks but 0 sentence boundaries "
            "(59 of the marks are followed by '‘')") in err


@pytest.mark.in_process
@pytest.mark.parametrize("verb", ["score", "estimate"])
def test_score_and_estimate_say_when_a_story_is_in_a_language_the_splitter_does_not_know(server, tmp_path, capsys,
                                                                                           verb):
    # a Polish story is read as English (no language of its own), and the user is told
    text = _story("Stary człowiek szedł powoli długą i cichą ulicą, myśląc o żonie numer {i}. ", 60)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "pl", "text": text}, ensure_ascii=False) + "\n", encoding="utf-8")
    capsys.readouterr()
    argv = [verb, str(corpus), "--base-url", server.base_url, "--model", "test-gen", "--cache",
            str(tmp_path / "cache"), "--no-progress", "--tokenizer", "words"]
    if verb == "score":
        argv += ["--out", str(tmp_path / "out"), "--endings", "2", "--no-report"]
    rc = main(argv)
    _, err = capsys.readouterr()
    assert rc == 0, err
    assert ("warning: story 'pl': it was read as English, but only 0% of its words are common English words "
            "(under 10%") in err


def test_run_json_says_which_languages_rules_split_the_stories(server, tmp_path):
    """A corpus of several languages: run.json `stories.languages` counts the stories by the
    language whose sentence rules split them (README, "Languages"), so a reader of the run
    knows which stories were held to another language's rules than English's, without
    reading its warnings."""
    rows = [{"id": "en", "text": _story("The old man walked slowly down the long and quiet street number {i}. ", 60)},
            {"id": "de", "text": _story("Der alte Mann ging langsam die lange und stille Straße Nummer {i} entlang, "
                                        "und er war nicht allein. ", 30)},
            {"id": "ja", "text": STORIES["japanese"]}]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    rc = main(["score", str(corpus), "--out", str(out), "--base-url", server.base_url, "--model", "test-gen",
               "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report",
               "--tokenizer", "words"])
    assert rc == 0
    record = json.loads((out / "run.json").read_text())
    assert record["stories"]["languages"] == {"English": 1, "German": 1, "other scripts": 1}

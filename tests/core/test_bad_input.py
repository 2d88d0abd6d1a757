"""Bad input to `tension-run score`, end to end against the loopback server.

Every kind of bad input is mixed with two valid stories (520-700 words each) and
run through the real CLI. For each kind we check the exact message (file:line
field, or the flag / config key), that the valid stories were still scored when
the run can go on, the exit status (0: nothing failed, warnings only; 1: bad
records or an unusable file/cache; 2: bad flags or config), and the summary.

Decisions this file pins down (what the code does, asserted):
- blank lines and CRLF line ends are not errors (exit 0);
- a story skipped by the word filter, and a story with no position to score (no
  sentence boundary, one sentence), is reported but does not fail the run (exit 0);
- control characters escaped inside a JSON string are kept and the story is
  scored; a raw (unescaped) control byte makes the line invalid JSON.
Known bugs are `xfail(strict=True)` tests at the end of the file.

Every run is the CLI's `main()` in this process (`tension_run`), against the
in-process server: the subject is what a command says, writes and exits with. The
two tests named `..._subprocess` ran the console script once; they keep their ids,
and the console script's own exit path is held by the specs of the process
(tests/core/test_reliability_process.py, tests/cache/test_damaged.py).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus, write_story

GOOD = ("story-000", "story-001")


# --- helpers -------------------------------------------------------------------


def _good_lines(tmp_path: Path, seed: int = 3) -> list[bytes]:
    """Two valid stories (ids story-000, story-001) as JSONL lines."""
    c = make_corpus(tmp_path / "good-src.jsonl", 2, seed=seed)
    lines = c.read_bytes().splitlines(keepends=True)
    c.unlink()
    assert len(lines) == 2
    return lines


def _line(x: bytes | str | dict) -> bytes:
    if isinstance(x, dict):
        x = json.dumps(x)
    if isinstance(x, str):
        x = x.encode("utf-8")
    return x if x.endswith(b"\n") else x + b"\n"


def _jsonl(tmp_path: Path, *middle: bytes | str | dict, name: str = "corpus.jsonl") -> Path:
    """Line 1: a valid story; lines 2..: `middle`; then the other valid story."""
    g1, g2 = _good_lines(tmp_path)
    p = tmp_path / name
    p.write_bytes(g1 + b"".join(_line(m) for m in middle) + g2)
    return p


def _story_text(words: int, seed: int = 9) -> str:
    return write_story(random.Random(seed), words)


def _base_args(server, tmp_path: Path, corpus: Path | str, *extra: str) -> list[str]:
    base = {"--out": str(tmp_path / "out"), "--base-url": server.base_url, "--model": "test-gen", "--endings": "3",
            "--cache": str(tmp_path / "cache")}
    # a flag given twice is a usage error: a flag in `extra` replaces its base value
    return ["score", str(corpus), *(x for f, v in base.items() if f not in extra for x in (f, v)),
            "--no-progress", "--no-report", *extra]


def _run(tension_run, server, tmp_path, corpus, *extra: str) -> tuple[int, str, str]:
    """`score` on `corpus` in process (the `tension_run` fixture): its status, stdout, stderr."""
    r = tension_run(*_base_args(server, tmp_path, corpus, *extra))
    return r.returncode, r.stdout, r.stderr


def _scored_ids(tmp_path: Path) -> list[str]:
    p = tmp_path / "out" / "positions.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    return [r["id"] for r in rows]


# --- the kinds -----------------------------------------------------------------


@dataclass
class Kind:
    """One kind of bad input.

    build(tmp_path) -> (corpus path, extra CLI args). Messages are exact substrings
    of stderr after formatting with {corpus} and {tmp}. `scored`: ids positions.jsonl
    must hold (None: the run stops before scoring, nothing is written). `summary`:
    substrings of stdout+stderr.
    """

    build: Callable[[Path], tuple[Path, list[str]]]
    rc: int
    messages: list[str]
    scored: tuple[str, ...] | None = GOOD
    summary: list[str] = field(default_factory=list)
    not_scored: tuple[str, ...] = ()
    max_seconds: float | None = None


RECORD_FAILED = "1 stories failed (see above); the others were scored"
SCORED_2 = "2 stories (0 skipped by the word filter)"


def _only(data: bytes):
    def build(tmp_path):
        p = tmp_path / "corpus.jsonl"
        p.write_bytes(data)
        return p, []
    return build


def _crlf(tmp_path):
    p = tmp_path / "corpus.jsonl"
    p.write_bytes(b"".join(line.rstrip(b"\n") + b"\r\n" for line in _good_lines(tmp_path)))
    return p, []


def _mixed(*middle):
    return lambda tmp_path: (_jsonl(tmp_path, *middle), [])


def _bad_flag(*flags: str):
    return lambda tmp_path: (_jsonl(tmp_path), list(flags))


def _config(text: str):
    def build(tmp_path):
        cfg = tmp_path / "run.toml"
        cfg.write_text(text)
        return _jsonl(tmp_path), ["--config", str(cfg)]
    return build


def _folder_with_bad_txt(tmp_path):
    d = tmp_path / "stories"
    d.mkdir()
    for line in _good_lines(tmp_path):
        rec = json.loads(line)
        (d / f"{rec['id']}.txt").write_text(rec["text"], encoding="utf-8")
    (d / "latin1.txt").write_bytes("Mara said caf\u00e9 and left. ".encode("latin-1") * 120)
    return d, []


def _empty_folder(tmp_path):
    d = tmp_path / "stories"
    d.mkdir()
    (d / "notes.md").write_text("not a story\n")
    return d, []


def _cache_is_a_file(tmp_path):
    (tmp_path / "cachefile").write_text("not a cache\n")
    return _jsonl(tmp_path), ["--cache", str(tmp_path / "cachefile")]


def _cache_under_a_file(tmp_path):
    (tmp_path / "afile").write_text("x\n")
    return _jsonl(tmp_path), ["--cache", str(tmp_path / "afile" / "cache")]


def _cache_in_readonly_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return _jsonl(tmp_path), ["--cache", str(ro / "cache")]


def _out_is_a_file(tmp_path):
    (tmp_path / "out").write_text("I am a file\n")
    return _jsonl(tmp_path), []


NO_BOUNDARY = " ".join(random.Random(4).choice("the old keeper watched a grey boat drift past".split())
                       for _ in range(600))  # 600 words, no terminal punctuation, so one "sentence"
ONE_SENTENCE = "Mara " + " ".join(random.Random(5).choice("the old keeper watched a grey boat".split())
                                  for _ in range(599)) + "."
CONTROL = _story_text(600, seed=21).replace(" the ", " the\x00 ", 3).replace(" a ", " a\x1b[31m ", 3)
BIG = _story_text(50_000, seed=22)
BIG_WORDS = len(BIG.split())

KINDS: dict[str, Kind] = {
    # -- whole files
    # nothing to score: a failed run, no outputs (an earlier run's in --out are kept: test_api_findings.py)
    "empty file": Kind(_only(b""), 1, ["error: {corpus}: no stories (the file is empty)"], scored=None,
                       summary=["0 stories"]),  # and no "1 stories failed": test_input_files.py
    "only blank lines": Kind(_only(b"\n   \n\t\n\r\n"), 1, ["error: {corpus}: no stories (the file is empty)"],
                             scored=None, summary=["0 stories"]),
    "blank lines between good records (fine)": Kind(_mixed("", "   ", "\t"), 0, [],
                                                    summary=[SCORED_2, "outputs in"]),
    "CRLF line ends (fine)": Kind(_crlf, 0, [], summary=[SCORED_2]),
    # -- bad records (line 2 of the file)
    "invalid JSON": Kind(_mixed('{"id": "x", "text": "unterminated'), 1,
                         ["error: {corpus}:2: not valid JSON (JSON is malformed:"], summary=[SCORED_2, RECORD_FAILED]),
    "JSON array line": Kind(_mixed('["story-x", "some text"]'), 1,
                            ["error: {corpus}:2: Expected `object`, got `array`"], summary=[SCORED_2, RECORD_FAILED]),
    "id is a number": Kind(_mixed({"id": 7, "text": "Some text."}), 1,
                           ["error: {corpus}:2 field `id`: expected a string, got a number"],
                           summary=[SCORED_2, RECORD_FAILED]),
    "text is a list": Kind(_mixed({"id": "x", "text": ["a", "list"]}), 1,
                           ["error: {corpus}:2 field `text`: expected a string, got an array"],
                           summary=[SCORED_2, RECORD_FAILED]),
    "group is a number": Kind(_mixed({"id": "x", "text": _story_text(600), "group": 3}), 1,
                              ["error: {corpus}:2 field `group`: expected a string, got a number"],
                              summary=[SCORED_2, RECORD_FAILED], not_scored=("x",)),
    "missing text": Kind(_mixed({"id": "x", "title": "no text"}), 1,
                         ["error: {corpus}:2 field `text`: missing required field"], summary=[SCORED_2, RECORD_FAILED]),
    "missing id": Kind(_mixed({"text": _story_text(600)}), 1,
                       ["error: {corpus}:2 field `id`: missing required field"], summary=[SCORED_2, RECORD_FAILED]),
    "empty text": Kind(_mixed({"id": "x", "text": ""}), 1, ["error: {corpus}:2 field `text`: empty text"],
                       summary=[SCORED_2, RECORD_FAILED]),
    "whitespace text": Kind(_mixed({"id": "x", "text": " \n\t  "}), 1, ["error: {corpus}:2 field `text`: empty text"],
                            summary=[SCORED_2, RECORD_FAILED]),
    "duplicate id": Kind(_mixed({"id": "story-000", "text": _story_text(600)}), 1,
                         ["error: {corpus}:2 field `id`: duplicate id 'story-000' (first on line 1)"],
                         summary=[SCORED_2, RECORD_FAILED]),
    "non-UTF-8 bytes": Kind(_mixed(b'{"id": "x", "text": "caf\xe9 au lait"}'), 1,
                            ["error: {corpus}:2: not valid UTF-8 (byte 0xe9 at column 25)"],
                            summary=[SCORED_2, RECORD_FAILED]),
    "raw control byte in a JSON string": Kind(_mixed(b'{"id": "x", "text": "bell\x07here"}'), 1,
                                              ["error: {corpus}:2: not valid JSON (JSON is malformed: invalid character"],
                                              summary=[SCORED_2, RECORD_FAILED]),
    # -- stories that are valid records but cannot (all) be scored: warnings, exit 0
    "no sentence boundary": Kind(
        _mixed({"id": "nb", "text": NO_BOUNDARY}), 0,
        ["warning: story 'nb' has no position to score (1 sentence(s): no sentence boundary found); "
         "its statistics are empty"], summary=["3 stories (0 skipped by the word filter)"], not_scored=("nb",)),
    "one sentence": Kind(
        _mixed({"id": "one", "text": ONE_SENTENCE}), 0,
        ["warning: story 'one' has no position to score (1 sentence(s): no sentence boundary found); "
         "its statistics are empty"], summary=["3 stories (0 skipped by the word filter)"], not_scored=("one",)),
    "50,000-word story": Kind(_mixed({"id": "big", "text": BIG}), 0, [],
                              summary=["2 stories (1 skipped by the word filter)"], not_scored=("big",)),
    "10 MB line": Kind(_mixed({"id": "huge", "text": "word " * 2_100_000}), 0, [],
                       summary=["2 stories (1 skipped by the word filter)"], not_scored=("huge",), max_seconds=60),
    "10 MB line without spaces": Kind(_mixed({"id": "blob", "text": "x" * 10_500_000}), 0, [],
                                      summary=["2 stories (1 skipped by the word filter)"], not_scored=("blob",),
                                      max_seconds=60),
    "control characters in text (scored)": Kind(_mixed({"id": "ctrl", "text": CONTROL}), 0, [],
                                                summary=["3 stories (0 skipped by the word filter)"]),
    # -- folders of .txt
    "folder with a non-UTF-8 .txt": Kind(_folder_with_bad_txt, 1,
                                         ["error: {corpus}/latin1.txt: not valid UTF-8 (byte offset 13)"],
                                         summary=[SCORED_2, RECORD_FAILED]),
    "folder with no .txt files": Kind(_empty_folder, 1, ["error: {corpus}: no .txt files in this folder"], scored=None,
                                      summary=["0 stories"]),
    "corpus does not exist": Kind(lambda tmp_path: (tmp_path / "nope.jsonl", []), 1,
                                  ["error: {corpus}: cannot open: No such file or directory"], scored=None),
    # -- config file
    "unknown config key": Kind(_config("endingz = 3\n"), 2, ["error: {tmp}/run.toml: unknown key `endingz` (known: "],
                               scored=None),
    "invalid TOML": Kind(_config("endings = [\n"), 2, ["error: {tmp}/run.toml: not valid TOML: "], scored=None),
    "config value of the wrong type": Kind(_config('temperature = "hot"\n'), 2,
                                           ["error: {tmp}/run.toml: Expected `float`, got `str` - at `$.temperature`"],
                                           scored=None),
    "config value out of range": Kind(_config("top-p = 2\n"), 2, ["error: top-p: expected a number in (0, 1], got 2"],
                                      scored=None),
    # -- flags
    "--endings 0": Kind(_bad_flag("--endings", "0"), 2, ["error: endings: expected an integer >= 1, got 0"],
                        scored=None),
    "--top-p 2": Kind(_bad_flag("--top-p", "2"), 2, ["error: top-p: expected a number in (0, 1], got 2.0"], scored=None),
    "--window 4": Kind(_bad_flag("--window", "4"), 2, ["error: window: expected an odd integer >= 1, got 4"],
                       scored=None),
    "--temperature abc": Kind(_bad_flag("--temperature", "abc"), 2,
                              ["error: argument --temperature: invalid float value: 'abc'"], scored=None),
    "--temperature nan": Kind(_bad_flag("--temperature", "nan"), 2,
                              ["error: temperature: expected a number in [0, 100], got nan"], scored=None),
    "--min-words above --max-words": Kind(_bad_flag("--min-words", "6000"), 2,
                                          ["error: min-words: expected 0 <= min-words <= max-words (5000), got 6000"],
                                          scored=None),
    "--judge-base-url not a URL": Kind(_bad_flag("--judge-base-url", "gpu-box:8001"), 2,
                                       ["error: judge-base-url: expected an http(s) URL, got 'gpu-box:8001'"],
                                       scored=None),
    # -- paths
    "cache path is a regular file": Kind(_cache_is_a_file, 2, ["error: cache: {tmp}/cachefile is a file; give the "
                                                                "folder that holds data.mdb"], scored=None),
    "cache path under a regular file": Kind(_cache_under_a_file, 1,
                                            ["error: cannot open the cache at {tmp}/afile/cache: "], scored=None),
    "cache path in a read-only folder": Kind(_cache_in_readonly_dir, 1, ["error: cannot open the cache at {tmp}/ro/cache: "],
                                             scored=None),
    "--out is a file": Kind(_out_is_a_file, 2, ["error: --out {tmp}/out: exists and is not a folder"], scored=None),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.in_process
def test_bad_input(kind, server, tmp_path, tension_run):
    k = KINDS[kind]
    if kind == "cache path in a read-only folder" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    corpus, extra = k.build(tmp_path)
    t0 = time.monotonic()
    rc, out, err = _run(tension_run, server, tmp_path, corpus, *extra)
    seconds = time.monotonic() - t0
    fmt = {"corpus": corpus, "tmp": tmp_path}

    assert rc == k.rc, f"exit status {rc}, want {k.rc}\nstdout:\n{out}\nstderr:\n{err}"
    for m in k.messages:
        assert m.format(**fmt) in err, f"missing {m.format(**fmt)!r} in stderr:\n{err}"
    for s in k.summary:
        assert s in out + err, f"missing {s!r} in the output:\n{out}\n{err}"
    if k.rc == 0:
        assert "error" not in err.lower(), err
        assert "stories failed" not in err
    if k.max_seconds is not None:
        assert seconds < k.max_seconds, f"took {seconds:.1f} s"

    if k.scored is None:
        # The run stops before it starts: one clear line, no outputs, no traceback.
        assert "Traceback" not in err
        assert len([x for x in err.splitlines() if "error:" in x]) == 1, err
        assert not (tmp_path / "out" / "positions.jsonl").exists()
        return
    ids = _scored_ids(tmp_path)
    for sid in k.scored:
        assert sid in ids, f"{sid} was not scored: {sorted(set(ids))}"
    for sid in k.not_scored:
        assert sid not in ids
    if kind == "control characters in text (scored)":
        assert "ctrl" in ids
    if kind == "duplicate id":
        # the first story-000 is scored once, the duplicate not at all
        rows = [json.loads(x) for x in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()]
        keys = [(r["id"], r["k"]) for r in rows]
        assert len(keys) == len(set(keys))
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["status"] == "complete"
    assert len(run["stories"]["input_errors"]) == (1 if k.rc == 1 else 0)


@pytest.mark.in_process
def test_skipped_stories_are_recorded_with_the_reason(server, tmp_path, tension_run):
    """A story outside --min-words/--max-words is skipped with the reason (run.json)
    and does not fail the run."""
    corpus = _jsonl(tmp_path, {"id": "big", "text": BIG}, {"id": "tiny", "text": "Too short to score. " * 10})
    rc, out, err = _run(tension_run, server, tmp_path, corpus)
    assert rc == 0, err
    assert "2 stories (2 skipped by the word filter)" in out
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["stories"]["skipped"] == [
        {"id": "big", "reason": f"{BIG_WORDS} words, more than --max-words 5000"},
        {"id": "tiny", "reason": "40 words, fewer than --min-words 500"},
    ]
    assert sorted(set(_scored_ids(tmp_path))) == list(GOOD)


@pytest.mark.in_process
def test_no_position_story_is_recorded_in_run_json(server, tmp_path, tension_run):
    corpus = _jsonl(tmp_path, {"id": "nb", "text": NO_BOUNDARY})
    rc, _, err = _run(tension_run, server, tmp_path, corpus)
    assert rc == 0, err
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["stories_without_positions"] == {"nb": "1 sentence(s): no sentence boundary found"}
    # the story is kept (stories.csv has a row for it) but has no positions
    stories_csv = (tmp_path / "out" / "stories.csv").read_text().splitlines()
    assert any(line.startswith("nb,") for line in stories_csv)


@pytest.mark.in_process
def test_many_bad_records_in_one_file_subprocess(server, tmp_path, tension_run):
    """All record-level kinds in one file, through the CLI (in process; the name is
    the id from when it was the console script): every bad line is reported with
    file:line field, the good stories are scored, the summary counts the failures,
    exit status 1."""
    bad = [
        '{"id": "x1", "text": "unterminated',  # 2
        '["an", "array"]',  # 3
        json.dumps({"id": 7, "text": "numeric id"}),  # 4
        json.dumps({"id": "x2", "text": ["a", "list"]}),  # 5
        json.dumps({"id": "x3", "text": _story_text(600), "group": 3}),  # 6
        json.dumps({"id": "x4"}),  # 7
        json.dumps({"text": "no id"}),  # 8
        json.dumps({"id": "x5", "text": "   "}),  # 9
        json.dumps({"id": "story-000", "text": _story_text(600)}),  # 10
        b'{"id": "x6", "text": "caf\xe9"}',  # 11
        "",  # 12 blank: not an error
        json.dumps({"id": "x7", "text": None}),  # 13
    ]
    corpus = _jsonl(tmp_path, *bad)
    r = tension_run(*_base_args(server, tmp_path, corpus))
    assert r.returncode == 1, r.stderr
    want = [
        f"{corpus}:2: not valid JSON",
        f"{corpus}:3: Expected `object`, got `array`",
        f"{corpus}:4 field `id`: expected a string, got a number",
        f"{corpus}:5 field `text`: expected a string, got an array",
        f"{corpus}:6 field `group`: expected a string, got a number",
        f"{corpus}:7 field `text`: missing required field",
        f"{corpus}:8 field `id`: missing required field",
        f"{corpus}:9 field `text`: empty text",
        f"{corpus}:10 field `id`: duplicate id 'story-000' (first on line 1)",
        f"{corpus}:11: not valid UTF-8 (byte 0xe9",
        f"{corpus}:13 field `text`: expected a string, got null",
    ]
    errors = [x for x in r.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == len(want), r.stderr
    for w, line in zip(want, errors):
        assert line.startswith(f"error: {w}"), (w, line)
    assert f"{len(want)} stories failed (see above); the others were scored" in r.stderr
    assert SCORED_2 in r.stdout
    assert "Traceback" not in r.stderr
    assert sorted(set(_scored_ids(tmp_path))) == list(GOOD)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert len(run["stories"]["input_errors"]) == len(want)


@pytest.mark.in_process
def test_bad_flag_subprocess_exits_2_without_traceback(server, tmp_path, tension_run):
    corpus = _jsonl(tmp_path)
    r = tension_run(*_base_args(server, tmp_path, corpus, "--window", "4"))
    assert r.returncode == 2
    assert r.stderr.strip() == "error: window: expected an odd integer >= 1, got 4"
    r = tension_run(*_base_args(server, tmp_path, corpus, "--temperature", "abc"))
    assert r.returncode == 2
    assert "error: argument --temperature: invalid float value: 'abc'" in r.stderr
    assert not (tmp_path / "out").exists()


# --- bugs ----------------------------------------------------------------------


@pytest.mark.in_process
def test_bug_skipped_story_is_named_with_its_reason_on_the_console(server, tmp_path, tension_run):
    corpus = _jsonl(tmp_path, {"id": "big", "text": BIG})
    rc, out, err = _run(tension_run, server, tmp_path, corpus)
    assert rc == 0
    assert f"{BIG_WORDS} words, more than --max-words 5000" in out + err
    assert "'big'" in out + err or "big:" in out + err


@pytest.mark.in_process
@pytest.mark.parametrize("flag, value, named", [("--temperature", "inf", "temperature:"),
                                                ("--late-threshold", "2", "late-threshold")])
def test_bug_a_temperature_of_inf_or_a_late_threshold_above_one_is_rejected(server, tmp_path, tension_run, flag,
                                                                             value, named):
    corpus = _jsonl(tmp_path)
    rc, out, err = _run(tension_run, server, tmp_path, corpus, flag, value)
    assert rc == 2, (out, err)
    assert named in err


@pytest.mark.in_process
def test_bug_bad_tokenizer_flag_is_a_usage_error(server, tmp_path, tension_run):
    corpus = _jsonl(tmp_path)
    rc, out, err = _run(tension_run, server, tmp_path, corpus, "--tokenizer", str(tmp_path / "missing-tokenizer.json"))
    assert "--tokenizer" in err
    assert rc == 2, (out, err)
    assert "rerun the same command" not in err


@pytest.mark.in_process
def test_bug_embedded_profile_ignored_when_base_url_given(server, tmp_path, capsys):
    from tension.core.serving import embedded

    state = embedded.paths().state
    state.parent.mkdir(parents=True, exist_ok=True)  # the private HOME of this test
    state.write_text(json.dumps({"url": "http://127.0.0.1:9", "model": "smollm2-135m", "pid": os.getpid(),
                                 "log": "x", "started": 0.0}))
    assert embedded.running_state() is not None
    corpus = tmp_path / "tiny.jsonl"  # nothing to score: only the settings matter
    corpus.write_text(json.dumps({"id": "tiny", "text": "Too short to score."}) + "\n")
    capsys.readouterr()
    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url,
               "--model", "test-gen", "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report"])
    assert rc == 1  # every story skipped by the word filter: nothing was produced (issue 16)
    cfg = json.loads((tmp_path / "out" / "run.json").read_text())["config"]
    # the paper's defaults, as with any non-embedded server
    assert (cfg["endings"], cfg["temperature"], cfg["max_tokens"], cfg["judge_constraint"]) == (100, 1.2, 150, "none")

"""Which release reads which cache (issue 36, M14), and who may read it (S12).

Compressed records came without a format change, so a release reading up to format
1 took a merged cache's records for damaged ones and asked everything again. Since
then a record form added comes with a format: 2, compressed records; 3, verdicts and
judged records linked to their endings (M4). A cache this release writes records
into is format 3, which an older release refuses ("upgrade tension-run"), the rule it
has always had: format > its own. Every cache verb keeps that: those that only read
or only delete leave the format as it was.
A cache folder this release makes is private (0700, files 0600): it holds every
story and ending, and a shared node's other users must not read them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import lmdb
import msgspec
import pytest

from tension.cache import records
from tension.cache.store import FORMAT_VERSION, Store
from tension.core.cli import main
from tension.testing.cache_records import cache_with, key, score_argv, set_format, verdict
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

PREVIOUS = 2  # the format the release before the links of verdicts to their endings reads up to


def _format(path: Path) -> int:
    env = lmdb.open(str(path), max_dbs=8, readonly=True, lock=False)
    try:
        with env.begin(db=env.open_db(b"meta", create=False)) as txn:
            return int(txn.get(b"format"))
    finally:
        env.close()


def _previous_release_refuses(path: Path) -> bool:
    """The previous releases' check at every open (cache/store.py, since format 1): a
    format above its own is refused with "upgrade tension-run", never read."""
    return _format(path) > PREVIOUS


def _format_1_cache(path: Path) -> Path:
    """A cache as the previous release wrote it: format 1, records uncompressed."""
    with Store(path) as store:
        store.put_values([("verdicts", key(1), bytes(records.encode(verdict("Y"), compress=False)))])
    set_format(path, 1)
    return path


def test_the_format_is_3_since_verdicts_carry_links_to_their_endings():
    assert FORMAT_VERSION == 3 > PREVIOUS


@pytest.mark.parametrize("endings", ["fixed", "adaptive"])
def test_a_cache_written_by_a_run_is_one_the_previous_release_refuses(tmp_path, endings):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    extra = ["--target-half-width", "0.3", "--round-endings", "2", "--max-endings", "4"] if endings == "adaptive" else []
    with LoopbackServer(model=["test-gen", "test-judge"]) as srv:
        argv = score_argv(corpus, tmp_path / "out", tmp_path / "cache", srv.base_url, *extra)
        if extra:  # the adaptive flags in place of --endings
            i = argv.index("--endings")
            del argv[i:i + 2]
        assert main(argv) == 0
    with Store(tmp_path / "cache", readonly=True) as store:
        compressed = any(records.is_compressed(v) for _, v in store.values("verdicts"))
        verdicts = [rec for _, rec in store.keys("verdicts")]
        judged = [rec for _, rec in store.keys("positions")]
    assert compressed and _previous_release_refuses(tmp_path / "cache")
    # the records of format 3: every verdict and judged record names its endings
    assert verdicts and all(isinstance(r, records.Verdict) and len(r.of_ending) == 8 for r in verdicts)
    assert judged and all(isinstance(r, records.JudgedPosition) and len(r.of_endings) == 8 for r in judged)


class _PreviousVerdict(msgspec.Struct, tag="verdict", kw_only=True, omit_defaults=True):
    """The verdict record as the release reading up to format 2 decodes it (no link)."""

    text: str
    finish_reason: str | None
    model: str
    usage: records.Usage
    created: float
    seconds: float = 0.0
    first_logprobs: dict[str, float] | None = None


def test_a_verdict_of_either_form_reads_as_the_same_answer():
    """The link is a field more: the previous release's decoder reads a linked verdict's
    answer (it refuses the cache for what it would write and merge, not for what it
    reads), and this one reads an unlinked verdict with an empty link."""
    linked = msgspec.structs.replace(verdict("Y"), of_ending=records.ending_link(key(1), "an ending"))
    previous = msgspec.msgpack.decode(bytes(records.encode(linked, compress=False))[5:], type=_PreviousVerdict)
    assert (previous.text, previous.first_logprobs) == (linked.text, linked.first_logprobs)
    unlinked = records.decode(msgspec.msgpack.encode(previous))
    assert isinstance(unlinked, records.Verdict) and unlinked.of_ending == b"" and unlinked.text == "Y"


def _verbs(tmp_path: Path, src: Path) -> dict[str, tuple[list[str], Path, int]]:
    """Every cache verb on a format-1 cache: its argv, the cache it leaves, and that cache's format then."""
    old_dst = _format_1_cache(tmp_path / "old-dst")
    return {"stats": (["cache", "stats", str(src)], src, 1),
            "verify": (["cache", "verify", str(src)], src, 1),
            "drop": (["cache", "drop", str(src), "--role", "judge", "--yes"], src, 1),  # deletes: writes no record
            "recover": (["cache", "recover", str(src), str(tmp_path / "new")], tmp_path / "new", FORMAT_VERSION),
            "merge": (["cache", "merge", str(src), str(old_dst)], old_dst, FORMAT_VERSION),
            "merge into a new DST": (["cache", "merge", str(src), str(tmp_path / "m")], tmp_path / "m",
                                     FORMAT_VERSION)}


@pytest.mark.parametrize("verb", ["stats", "verify", "drop", "recover", "merge", "merge into a new DST"])
def test_every_cache_verb_leaves_a_format_the_release_reading_it_can_trust(tmp_path, verb):
    src = _format_1_cache(tmp_path / "src")
    cache_with(tmp_path / "other", {key(2): verdict("N")})
    argv, left, want = _verbs(tmp_path, src)[verb]
    assert main(argv) == 0
    assert _format(left) == want
    if want > PREVIOUS:  # it holds this release's records: the previous release refuses it, not misreads it
        assert _previous_release_refuses(left)
    assert _format(src) == 1  # a source is only read (drop only deletes)


@pytest.mark.parametrize("older", [1, 2])
def test_an_older_cache_is_marked_with_the_format_when_a_run_first_writes_to_it_and_not_before(tmp_path, older):
    path = _format_1_cache(tmp_path / "c")
    set_format(path, older)
    with Store(path) as store:  # opened to write, only read
        assert store.get("verdicts", key(1)) is not None
    assert _format(path) == older
    with Store(path) as store:
        store.put_many([("verdicts", key(3), verdict("Y"))])
    assert _format(path) == FORMAT_VERSION


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("made_by", ["a run", "cache recover", "cache merge"])
def test_a_cache_folder_made_is_private_to_its_user(tmp_path, made_by):
    before = os.umask(0o022)
    try:
        src = cache_with(tmp_path / "src", {key(1): verdict("Y")})
        made = tmp_path / "deep" / "made"
        if made_by == "a run":
            with Store(made) as store:
                store.put_many([("verdicts", key(2), verdict("N"))])
        else:
            verb = "recover" if made_by == "cache recover" else "merge"
            assert main(["cache", verb, str(src), str(made)]) == 0
    finally:
        os.umask(before)
    assert _mode(made) == 0o700
    assert {f.name: _mode(f) for f in made.iterdir()} == {"data.mdb": 0o600, "lock.mdb": 0o600}

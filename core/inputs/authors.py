"""Reading the fair-play authors' published result files (paper 003; their
repository eitanwagner/detective-stories-public, ``results/for eval2/``) as
`fairplay-metrics` input, so that the paper's numbers can be checked with one
command (docs/fairplay.md, "Reproducing the paper").

One JSON file per story, named by the command line that made it, e.g.
``-mn Llama-3.3-70B-Instruct -mn2 o3-mini -st Llama-3.3-70B-Instruct … --id 3 -es -tc -nsamp 20.json``.
The keys read (the rest, e.g. ``para_fill``, are ignored):

- ``ids``: the 1-based paragraphs every reader was asked at (19 of 25);
- ``direct["1"]``: the gullible reader, one row per id;
- ``sampling``: the know-it-all's culprit frequencies over the K continuations,
  one row per id (all zero where no continuation named a suspect);
- ``suspects``; ``real_probs`` (its argmax is the culprit); ``distractor_probs``
  (its argmax the distractor); ``paragraphs`` (their count is L; without it L is
  the last id).

``with_prev/`` holds the experienced readers, by setting: in ``-es2`` files
``direct`` "0", "1", "2" are 0, 9 and 3 previous stories, in ``-es3`` files another
0-shot prompt, 2 and 5 previous stories (their analysis code says so); they become
the readers ``experienced_0``, ``experienced_9``, ``experienced_3``,
``experienced_0alt``, ``experienced_2`` and ``experienced_5`` of the story with the
same generator, story type and id.

Their analysis (``analyze_results/analyzer_core.py``) is followed where it decides
what enters the scores: a reader row shorter than the suspect list becomes a tie
of every suspect (an all-zero row here); a story whose know-it-all does not end
on the culprit with at least 0.7 is left out (a note says which); of two files of
one story, the one with 20 samples is used.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from tension.core.errors import InputError
from tension.core.inputs.readers import ReaderRecord, ScoredWhodunit, check_record

__all__ = ["FINAL_MIN", "WITH_PREV", "AuthorsRead", "file_params", "story_key", "read_authors"]

FINAL_MIN = 0.7  # the know-it-all's last value must give the culprit at least this (their filter)
WITH_PREV = "with_prev"  # the folder of the experienced-reader files
# direct keys of the with_prev files -> our reader names (their EXPERIENCED_READER_LABELS)
_SETTINGS = {"-es2": {"0": "experienced_0", "1": "experienced_9", "2": "experienced_3"},
             "-es3": {"0": "experienced_0alt", "1": "experienced_2", "2": "experienced_5"}}


class AuthorsRead(msgspec.Struct, kw_only=True):
    stories: list[ScoredWhodunit]
    errors: list[InputError]
    notes: list[str]  # stories left out by the authors' own rules, duplicates skipped


def file_params(name: str) -> dict[str, Any]:
    """A result file's command line as {flag: value or True} (``-tb -1`` is a value)."""
    parts = name.removesuffix(".json").split()
    params: dict[str, Any] = {}
    i = 0
    while i < len(parts):
        if parts[i].startswith("-") and parts[i] != "-1":
            nxt = parts[i + 1] if i + 1 < len(parts) else None
            if nxt is not None and (not nxt.startswith("-") or nxt == "-1"):
                params[parts[i].lstrip("-")] = nxt
                i += 2
                continue
            params[parts[i].lstrip("-")] = True
        i += 1
    return params


def story_key(params: dict[str, Any]) -> tuple[str, str, str]:
    """(generator, story type, id) as their analysis keys a story; gemini-2.5-flash
    is told apart by its thinking budget (``-tb``)."""
    mn = str(params.get("mn"))
    if mn == "gemini-2.5-flash" and "tb" in params:
        mn = f"{mn}-tb{params['tb']}"
    return mn, str(params.get("st")), str(params.get("id", "-1"))


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda y: (values[y], -y))  # the first maximum, as numpy's


def _rows(path: str, field: str, ids: list[int], rows: Any, L: int, K: int) -> list[list[float] | None]:
    """A reader's values placed at its paragraphs (null elsewhere); a row shorter
    than the suspect list is a tie of every suspect (their analysis code)."""
    if not isinstance(rows, list) or len(rows) != len(ids):
        got = len(rows) if isinstance(rows, list) else type(rows).__name__
        raise InputError(path, 0, field, f"expected {len(ids)} rows (one per id), got {got}")
    out: list[list[float] | None] = [None] * L
    for i, (p, row) in enumerate(zip(ids, rows)):
        if not isinstance(row, list):
            raise InputError(path, 0, f"{field}[{i}]", f"expected a list of probabilities, got {row!r}")
        out[p - 1] = [0.0] * K if len(row) < K else row
    return out


def _load(path: Path) -> dict[str, Any]:
    try:
        data = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError) as e:
        raise InputError(str(path), 0, None, f"unreadable result file: {e}") from e
    if not isinstance(data, dict):
        raise InputError(str(path), 0, None, f"expected a JSON object, got {type(data).__name__}")
    return data


def _ids(path: str, data: dict[str, Any]) -> tuple[list[int], int]:
    ids = data.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(p, int) and p >= 1 for p in ids):
        raise InputError(path, 0, "ids", f"expected a list of paragraph numbers >= 1, got {ids!r}")
    paragraphs = data.get("paragraphs")
    L = len(paragraphs) if isinstance(paragraphs, list) and paragraphs else max(ids)
    if max(ids) > L:
        raise InputError(path, 0, "ids", f"paragraph {max(ids)} is past the story's {L} paragraphs")
    return ids, L


def _story(path: Path, data: dict[str, Any], key: tuple[str, str, str]) -> tuple[ReaderRecord | None, str | None]:
    """The story's record, or None and why their analysis leaves it out."""
    p = str(path)
    ids, L = _ids(p, data)
    suspects = data.get("suspects")
    if not isinstance(suspects, list) or not all(isinstance(x, str) for x in suspects):
        raise InputError(p, 0, "suspects", f"expected a list of names, got {suspects!r}")
    K = len(suspects)
    direct, sampling = data.get("direct"), data.get("sampling")
    if not isinstance(direct, dict) or "1" not in direct:
        raise InputError(p, 0, "direct", 'expected an object with the gullible reader under "1"')
    readers = {"gullible": _rows(p, 'direct["1"]', ids, direct["1"], L, K),
               "know_it_all": _rows(p, "sampling", ids, sampling, L, K)}
    final, last_gullible = readers["know_it_all"][ids[-1] - 1], readers["gullible"][ids[-1] - 1]
    assert final is not None and last_gullible is not None  # _rows fills the paragraph of every id
    real = data.get("real_probs") or []
    if real and len(real) != K:
        raise InputError(p, 0, "real_probs", f"expected {K} values (one per suspect), got {len(real)}")
    # Their rule: the culprit is argmax real_probs (else the gullible reader's last
    # argmax), and the know-it-all's last value must agree with at least 0.7.
    culprit = _argmax(real) if real else _argmax(last_gullible)
    if _argmax(final) != culprit or max(final) < FINAL_MIN:
        return None, (f"{p}: left out, as in the authors' analysis: the know-it-all's last value {final} does "
                      f"not give the culprit {suspects[culprit]!r} at least {FINAL_MIN}")
    dist = data.get("distractor_probs") or []
    distractor = _argmax(dist) if len(dist) == K and max(dist) > 0 else None
    mn, st, sid = key
    group = st if st != mn.split("-tb")[0] else mn
    return ReaderRecord(id=f"{group} {sid}", group=group, suspects=suspects, culprit=suspects[culprit],
                        distractor=None if distractor in (None, culprit) else suspects[distractor], L=L,
                        readers=readers), None


def _experienced(folder: Path, errors: list[InputError]) -> dict[tuple[str, str, str], dict[str, list]]:
    """The with_prev readers by story key."""
    found: dict[tuple[str, str, str], dict[str, list]] = {}
    for path in sorted((folder / WITH_PREV).glob("*.json")):
        params = file_params(path.name)
        kind = next((k for k in _SETTINGS if k.lstrip("-") in params), None)
        if kind is None:
            continue
        try:
            data = _load(path)
            ids, L = _ids(str(path), data)
            K = len(data.get("suspects") or [])
            direct = data.get("direct") or {}
            readers = found.setdefault(story_key(params), {})
            for k, name in _SETTINGS[kind].items():
                if direct.get(k):
                    readers[name] = _rows(str(path), f'direct["{k}"]', ids, direct[k], L, K)
        except InputError as e:
            errors.append(e)
    return found


def read_authors(folder: str | os.PathLike) -> AuthorsRead:
    """Every story of a ``results/for eval2``-style folder (and its ``with_prev/``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(str(folder), 0, None, "expected the folder of the authors' result files "
                                               "(results/for eval2 of their repository)")
    errors: list[InputError] = []
    notes: list[str] = []
    chosen: dict[tuple[str, str, str], tuple[Path, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.json")):
        params = file_params(path.name)
        key = story_key(params)
        # Their analysis keeps one file per story, preferring 20 samples to 5.
        if key in chosen and str(chosen[key][1].get("nsamp", "5")) == "20":
            notes.append(f"{path}: skipped, {chosen[key][0].name} has the same story with 20 samples")
            continue
        if key in chosen:
            notes.append(f"{chosen[key][0]}: skipped, {path.name} has the same story")
        chosen[key] = (path, params)
    experienced = _experienced(folder, errors)
    stories: list[ScoredWhodunit] = []
    for key, (path, _) in sorted(chosen.items(), key=lambda kv: str(kv[1][0])):
        try:
            record, why = _story(path, _load(path), key)
            if record is None:
                assert why is not None  # _story says why it leaves a story out
                notes.append(why)
                continue
            for name, rows in experienced.get(key, {}).items():
                record.readers[name] = rows
            stories.append(check_record(str(path), 0, record))
        except InputError as e:
            errors.append(e)
    if not stories and not errors:
        errors.append(InputError(str(folder), 0, None, "no result file (*.json) in the folder"))
    return AuthorsRead(stories=stories, errors=errors, notes=notes)

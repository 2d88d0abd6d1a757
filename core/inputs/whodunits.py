"""Reading `fairplay`'s input: whodunits as JSON Lines (`segments`, `segments_25`
or `text` split by --segment-rule; `suspects`, `culprit`, optional `distractor`,
`revelation` and `generator`), and the --suspects file that can name the suspects
of stories that do not."""

from __future__ import annotations

import os
import re
from typing import Any, Literal, overload

import msgspec

from tension.core.config.fairplay import FairPlayConfig
from tension.core.errors import InputError
from tension.core.formats import Generator
from tension.core.inputs.jsonl import check_label, decode_line, iter_lines, read_records
from tension.core.inputs.segment import split_sentences
from tension.core.prompts.answers import match_suspect

__all__ = ["WhodunitStory", "read_stories", "read_suspects_file", "segment_text"]


class WhodunitStory(msgspec.Struct, kw_only=True):
    id: str
    line: int
    group: str | None
    segments: list[str]
    suspects: list[str]  # empty until extracted, when neither the story nor --suspects names them
    culprit: str
    distractor: str | None
    revelation: int | None
    generator: Generator | None
    extracted_suspects: bool = False
    note: str | None = None  # a `text` record read as fewer segments than --segments: why (said at the start)

    @property
    def L(self) -> int:
        return len(self.segments)


def segment_text(text: str, rule: str, L: int) -> list[str]:
    """`text` as at most L consecutive chunks: its paragraphs (split at blank lines)
    or sentences, grouped in order so that chunk sizes (in units) differ by at most
    one, earlier chunks taking the extra unit. Fewer units than L: one per chunk."""
    if rule == "paragraphs":
        units = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    else:
        units = split_sentences(text)
    n = min(L, len(units))
    if n == 0:
        return []
    base, extra = divmod(len(units), n)
    out, start = [], 0
    for j in range(n):
        size = base + (1 if j < extra else 0)
        sep = "\n\n" if rule == "paragraphs" else " "
        out.append(sep.join(units[start:start + size]))
        start += size
    return out


@overload
def _one_name(path: str, line: int, field: str, value: Any, required: Literal[True]) -> str: ...
@overload
def _one_name(path: str, line: int, field: str, value: Any, required: bool) -> str | None: ...
def _one_name(path: str, line: int, field: str, value: Any, required: bool) -> str | None:
    """A name given as a string or a one-element list (the data sets do both)."""
    if value is None:
        if required:
            raise InputError(path, line, field, "missing required field")
        return None
    if isinstance(value, list):
        if len(value) != 1:
            raise InputError(path, line, field, f"expected one name, got a list of {len(value)}")
        value = value[0]
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, line, field, f"expected a non-empty string, got {value!r}")
    return value.strip()


def _string_list(path: str, line: int, field: str, value: Any, min_len: int = 1) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(path, line, field, "expected a list of strings")
    if len(value) < min_len:
        raise InputError(path, line, field, f"expected at least {min_len} entries, got {len(value)}")
    for j, v in enumerate(value):
        if not v.strip():
            raise InputError(path, line, f"{field}[{j}]", "empty string")
    return value


def _canonical(path: str, line: int, field: str, name: str, suspects: list[str]) -> str:
    """`name` as the suspect list spells it ("mackenzie" → "Mackenzie")."""
    idx, why = match_suspect(name, suspects)
    exact = [s for s in suspects if " ".join(s.casefold().split()) == " ".join(name.casefold().split())]
    if exact:
        return exact[0]
    if idx is None:
        raise InputError(path, line, field, f"{why}")
    return suspects[idx]


def _story(path: str, line: int, obj: dict, cfg: FairPlayConfig, suspects_map: dict[str, list[str]]
           ) -> WhodunitStory:
    """One validated story; no suspects if they have to be extracted."""
    sid = obj.get("id")
    if not isinstance(sid, str) or not sid.strip():
        raise InputError(path, line, "id", "missing required field" if sid is None else
                         f"expected a non-empty string, got {sid!r}")
    group = obj.get("group")
    if group is not None and not isinstance(group, str):
        raise InputError(path, line, "group", f"expected a string or null, got {group!r}")
    check_label(path, line, "id", sid)
    check_label(path, line, "group", group)
    note = None
    for field in ("segments", "segments_25"):
        if obj.get(field) is not None:
            segments = _string_list(path, line, field, obj[field], min_len=2)
            break
    else:
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError(path, line, "segments", "missing: give `segments` (a list of paragraphs), "
                                                     "`segments_25`, or `text` (split by --segment-rule)")
        segments = segment_text(text, cfg.segment_rule, cfg.segments)
        if len(segments) < 2:
            raise InputError(path, line, "text", f"only {len(segments)} {cfg.segment_rule} chunk(s); a "
                                                 f"story needs at least 2{_line_breaks(text, cfg.segment_rule)}")
        if len(segments) < cfg.segments:
            note = (f"its text has {len(segments)} {cfg.segment_rule}, fewer than --segments {cfg.segments}: "
                    f"it is read as {len(segments)} segments (L = {len(segments)})"
                    f"{_line_breaks(text, cfg.segment_rule)}")
    L = len(segments)
    culprit = _one_name(path, line, "culprit", obj.get("culprit"), True)
    distractor = _one_name(path, line, "distractor", obj.get("distractor"), False)
    suspects: list[str] | None
    if obj.get("suspects") is not None:
        suspects = _string_list(path, line, "suspects", obj["suspects"], min_len=2)
    else:
        suspects = suspects_map.get(sid)
    if suspects is not None:
        folded = [" ".join(s.casefold().split()) for s in suspects]
        if len(set(folded)) != len(folded):
            raise InputError(path, line, "suspects", "the same suspect twice")
        culprit = _canonical(path, line, "culprit", culprit, suspects)
        if distractor is not None:
            distractor = _canonical(path, line, "distractor", distractor, suspects)
            if distractor == culprit:
                raise InputError(path, line, "distractor", "the distractor is the culprit")
    elif not cfg.extract_suspects:
        raise InputError(path, line, "suspects", "missing: give `suspects`, a --suspects file, or allow "
                                                 "extraction (--extract-suspects)")
    revelation = obj.get("revelation")
    if revelation is not None and (not isinstance(revelation, int) or isinstance(revelation, bool)
                                   or not 1 <= revelation <= L):
        raise InputError(path, line, "revelation", f"expected a paragraph number 1..{L} or null, got {revelation!r}")
    generator = None
    if obj.get("generator") is not None:
        try:
            generator = msgspec.convert(obj["generator"], Generator)
        except msgspec.ValidationError as e:
            raise InputError(path, line, "generator", str(e)) from e
        if generator.L != L:
            raise InputError(path, line, "generator.L", f"{generator.L}, but the story has {L} segments")
        for field in ("paragraph_prompt", "final_prompt"):
            if "{story}" not in getattr(generator, field):
                # a continuation that cannot see the story would estimate nothing
                raise InputError(path, line, f"generator.{field}", "has no {story} placeholder")
    return WhodunitStory(id=sid, line=line, group=group, segments=segments, suspects=list(suspects or []),
                         culprit=culprit, distractor=distractor, revelation=revelation, generator=generator,
                         note=note)


def _line_breaks(text: str, rule: str) -> str:
    """What a text split into paragraphs at blank lines says of its single line breaks, when it has
    more of them than paragraphs: text exported one paragraph a line (no blank line between) is
    otherwise read as one or a few long paragraphs."""
    if rule != "paragraphs":
        return ""
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    breaks = sum(p.strip().count("\n") for p in paragraphs)
    if breaks < len(paragraphs):
        return ""
    return (f"; paragraphs are separated by blank lines, and its text has {breaks} single line breaks within "
            "them: if they separate its paragraphs, put a blank line between them (or give --segment-rule "
            "sentences)")


def read_suspects_file(path: str) -> dict[str, list[str]]:
    """--suspects FILE: JSON Lines {"id": ..., "suspects": [...]}. A bad line stops
    the run (it is a usage error: the user wrote the file for this run)."""
    out: dict[str, list[str]] = {}
    for line, raw in iter_lines(path):
        obj = decode_line(path, line, raw, dict)
        sid = obj.get("id")
        if not isinstance(sid, str):
            raise InputError(path, line, "id", "expected a string")
        out[sid] = _string_list(path, line, "suspects", obj.get("suspects"), min_len=2)
    return out


def read_stories(path: str | os.PathLike, cfg: FairPlayConfig
                 ) -> tuple[list[WhodunitStory], list[int], list[InputError]]:
    """Valid stories in file order, the indices of those whose suspects must be
    extracted, and one error per bad record."""
    suspects_map = read_suspects_file(cfg.suspects_file) if cfg.suspects_file else {}
    stories, errors = read_records(path, lambda p, line, obj: _story(p, line, obj, cfg, suspects_map),
                                   empty="stories")
    # Suspects given in the story or the --suspects file are at least two names.
    extract = [j for j, story in enumerate(stories) if not story.suspects]
    return stories, extract, errors

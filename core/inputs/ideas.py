"""Reading `generate`'s inputs: the ideas (JSON Lines, or a folder of .txt files)
and the pool of Step 0 references (paper 000, App. D: titles or story files)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, overload

import msgspec

from tension.core.config.generate import GenerateConfig
from tension.core.errors import ConfigError, InputError
from tension.core.inputs.jsonl import check_label, json_type, read_records, string_field
from tension.core.prompts import generate as gp

__all__ = ["Idea", "Reference", "ReferencePrompt", "read_ideas", "reference_pool"]


class Idea(msgspec.Struct, kw_only=True):
    id: str
    idea: str
    group: str | None = None
    suspects: list[str] = []
    culprit: str = ""
    distractor: str = ""


class Reference(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The Step 0 reference of a story: a title of the pool, or a story file."""

    kind: str  # "title" or "text"
    name: str  # the title as sent, or the file's stem
    sha256: str | None = None  # of the file's text (text mode), so the exact reference is known


class ReferencePrompt(msgspec.Struct, frozen=True):
    """A reference of the pool with the Step 0 prompt built from it."""

    reference: Reference
    prompt: str


def read_ideas(path: str | os.PathLike, whodunit: bool = False) -> tuple[list[tuple[int, Idea]], list[InputError]]:
    """(line, idea) pairs in file order and an error per bad record. A folder holds
    one idea per .txt file (id = file stem; line 0)."""
    p = Path(path)
    if p.is_dir():
        return _read_idea_folder(p, whodunit)
    return read_records(p, lambda path, lineno, obj: (lineno, _idea(path, lineno, obj, whodunit)),
                        id_of=lambda pair: pair[1].id, empty="ideas")


def _idea(path: str, lineno: int, obj: dict[str, Any], whodunit: bool) -> Idea:
    @overload
    def text(name: str) -> str: ...
    @overload
    def text(name: str, required: bool) -> str | None: ...
    def text(name: str, required: bool = True) -> str | None:
        v = string_field(path, lineno, obj, name, required)
        if v is not None and not v.strip():
            raise InputError(path, lineno, name, "expected a non-empty string")
        return v

    idea = Idea(id=text("id"), idea=text("idea"), group=text("group", required=False))
    check_label(path, lineno, "id", idea.id)  # the id and group reach the stories, CSV files and file names
    check_label(path, lineno, "group", idea.group)
    if not whodunit:
        return idea
    suspects = obj.get("suspects")
    if not isinstance(suspects, list) or len(suspects) < 2:
        got = "nothing" if suspects is None else json_type(suspects) if not isinstance(suspects, list) \
            else f"{len(suspects)} name(s)"
        raise InputError(path, lineno, "suspects", f"expected a list of at least 2 names, got {got}")
    for j, s in enumerate(suspects):
        if not isinstance(s, str) or not s.strip():
            got = "an empty string" if isinstance(s, str) else json_type(s)
            raise InputError(path, lineno, f"suspects[{j}]", f"expected a non-empty string, got {got}")
    if len(set(suspects)) != len(suspects):
        raise InputError(path, lineno, "suspects", "names must be distinct")
    idea.suspects = list(suspects)
    idea.culprit = text("culprit")
    idea.distractor = text("distractor")
    for name, value in (("culprit", idea.culprit), ("distractor", idea.distractor)):
        if value not in suspects:
            raise InputError(path, lineno, name, f"{value!r} is not one of the suspects")
    if idea.distractor == idea.culprit:
        raise InputError(path, lineno, "distractor", "must differ from the culprit")
    return idea


def _read_idea_folder(p: Path, whodunit: bool) -> tuple[list[tuple[int, Idea]], list[InputError]]:
    files = sorted(f for f in p.iterdir() if f.suffix == ".txt" and f.is_file())
    if not files:
        return [], [InputError(str(p), 0, None, "no .txt files in this folder")]
    if whodunit:
        return [], [InputError(str(p), 0, "suspects", "whodunit ideas need suspects, culprit and distractor: "
                                                      "give them as JSON Lines")]
    ideas, errors = [], []
    for f in files:
        try:
            text = f.read_bytes().decode("utf-8-sig")  # a byte order mark is no part of the text
        except (UnicodeDecodeError, OSError) as e:
            errors.append(InputError(str(f), 0, None, f"cannot read as UTF-8 text: {e}"))
            continue
        if not text.strip():
            errors.append(InputError(str(f), 0, "idea", "empty file"))
            continue
        ideas.append((0, Idea(id=f.stem, idea=text.strip())))
    return ideas, errors


def reference_pool(cfg: GenerateConfig) -> list[ReferencePrompt]:
    """Step 0's references: the given story files (full-text mode), else titles."""
    if cfg.reference_stories:
        pool = []
        for path in cfg.reference_stories:
            try:
                text = Path(path).read_bytes().decode("utf-8-sig").strip()
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"--reference-story {path}: cannot read as UTF-8 text: {e}") from e
            if not text:
                raise ConfigError(f"--reference-story {path}: the file is empty")
            ref = Reference(kind="text", name=Path(path).stem, sha256=hashlib.sha256(text.encode()).hexdigest())
            pool.append(ReferencePrompt(ref, gp.WARMUP_TEXT.format(story=text)))
        return pool
    if cfg.titles == "paper":
        titles = list(gp.PAPER_TITLES)
    elif cfg.titles == "recommended":
        titles = list(gp.RECOMMENDED_TITLES)
    else:
        try:
            lines = Path(cfg.titles).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--titles {cfg.titles}: expected 'paper', 'recommended' or a readable file "
                              f"with one title per line ({e})") from e
        titles = [t.strip() for t in lines if t.strip() and not t.lstrip().startswith("#")]
        if not titles:
            raise ConfigError(f"--titles {cfg.titles}: no titles in the file")
    return [ReferencePrompt(Reference(kind="title", name=t), gp.WARMUP_TITLE.format(ref_name=t)) for t in titles]

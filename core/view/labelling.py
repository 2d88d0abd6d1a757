"""The labelling page of a score run's audit (issue 60; docs/view.md "Labelling"): people
say, blind to the judge's answer, whether each sampled predicted ending matches what
happens. The run's audit/sample.json (drawn by `tension-run audit sample`) says what to
show; each answer is appended at once to audit/labels.jsonl (core/inputs/labels.py: flock
and one O_APPEND write), so a reload, a closed tab, a restarted view or a second annotator
loses nothing, and each person resumes where they stopped.

Who labels what: every annotator gets the shared items (agreement between people), then
the other items nobody has labelled yet, in the sample's order. An item shown to one
annotator is held for them for CLAIM_SECONDS in this process (a claim, in memory only), so
two people labelling at once get different items; a claim lost with a restart costs at
most an item labelled twice, which the audit counts once.

    rI/audit.html                      the page (its data: the sample's size, the annotators, the write token)
    api/rI/audit/NAME/state.json       NAME's labels so far (in the order given), the next item, progress
    api/rI/audit/item/N.json           item N as people see it: no judge's answer
    POST api/rI/audit/label            {"annotator", "key", "label"}: the view's write token in
                                       X-Tension-Token (core/view/app.py checks it and the Host)

This is the one place the view writes, and it writes only labels into the run's audit folder.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any

import msgspec

from tension.core.errors import InputError
from tension.core.inputs import labels as files

__all__ = ["Labelling", "CLAIM_SECONDS", "MAX_BODY", "label_page", "LabelRequest", "BadRequest"]

CLAIM_SECONDS = 600.0
MAX_BODY = 4096  # bytes of one label's request: a key (64 hex), a name (≤ 40), a label


class BadRequest(InputError):
    """A label request the page would never send: not JSON, a field missing or of another value."""


class LabelRequest(msgspec.Struct, forbid_unknown_fields=True):
    annotator: str
    key: str
    label: str


_request = msgspec.json.Decoder(LabelRequest)


class Labelling:
    """The labelling of one score run folder: its sample (read once), its labels (read from
    the file on every request, so several views and `audit import` agree), the claims."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir
        self.sample = files.read_sample(run_dir)
        self.items = self.sample.items
        self.index = {it.key: i for i, it in enumerate(self.items)}
        self.claims: dict[str, tuple[str, float]] = {}  # key -> (annotator, since)

    @staticmethod
    def available(run_dir: Path) -> bool:
        return files.sample_path(run_dir).is_file()

    def labels(self) -> list[files.Label]:
        return files.read_labels(self.dir, self.index)[0]

    def page(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for who in {(lab.key, lab.annotator) for lab in self.labels()}:
            counts[who[1]] = counts.get(who[1], 0) + 1
        return {"kind": "label", "dir": str(self.dir), "items": len(self.items), "shared": self.sample.shared,
                "annotators": dict(sorted(counts.items())), "labels": list(files.LABELS)}

    def item(self, n: int) -> dict[str, Any]:
        if not 0 <= n < len(self.items):
            raise InputError(str(files.sample_path(self.dir)), 0, None,
                             f"no item {n} (the sample has {len(self.items)})")
        it = self.items[n]
        return {"index": n, "key": it.key, "story": it.story, "k": it.k, "pct": it.pct, "shared": it.shared,
                "prefix": it.prefix, "continuation": it.continuation, "predicted": it.predicted}

    def state(self, annotator: str) -> dict[str, Any]:
        """`annotator`'s labels so far (latest per item, in the order first given), their next
        item (claimed for them), and progress."""
        given = self.labels()
        who = files.person(files.check_annotator("annotator", 0, annotator), files.names_of(given))
        mine: dict[str, str] = {}
        others: set[str] = set()
        for lab in given:
            if lab.annotator == who:
                mine[lab.key] = lab.label  # dict order: first given; value: latest
            else:
                others.add(lab.key)
        t = time.monotonic()
        held = {k for k, (by, since) in self.claims.items() if by != who and t - since < CLAIM_SECONDS}
        todo = [i for i, it in enumerate(self.items)
                if it.key not in mine and (it.shared or (it.key not in others and it.key not in held))]
        nxt = todo[0] if todo else None
        if nxt is not None:
            self.claims[self.items[nxt].key] = (who, t)
        shared_done = sum(1 for it in self.items if it.shared and it.key in mine)
        return {"annotator": who, "labelled": [{"index": self.index[k], "label": v} for k, v in mine.items()],
                "next": nxt, "done": len(mine), "left": len(todo), "shared": self.sample.shared,
                "shared_done": shared_done}

    def write(self, body: bytes) -> dict[str, Any]:
        """Append one label (a POST's body, checked) and return the annotator's new state."""
        try:
            req = _request.decode(body)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise BadRequest("request", 0, None, f"expected {{\"annotator\", \"key\", \"label\"}}: {e}") from None
        try:
            who = files.person(files.check_annotator("request", 0, req.annotator), files.names_of(self.labels()))
            label = files.check_label_value("request", 0, req.label)
        except InputError as e:
            raise BadRequest(e.path, e.line, e.field, e.message) from None
        if req.key not in self.index:
            raise BadRequest("request", 0, "key", f"{req.key[:80]!r} is no item of this run's audit sample")
        files.append_labels(self.dir, [files.Label(key=req.key, annotator=who, label=label, time=files.now())])
        self.claims.pop(req.key, None)
        return self.state(who)


def label_page(title: str, data: dict[str, Any], payload: str, depth: int) -> bytes:
    """The page's HTML shell: its data inline (`payload`, JSON made safe by the site), the
    view's style sheet and the page's own script."""
    root = "../" * depth
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)} · tension-run view</title>"
            f'<link rel="stylesheet" href="{root}static/view.css">'
            f'<link rel="stylesheet" href="{root}static/label.css"></head>\n'
            f'<body><nav><a href="{root}index.html">runs</a></nav><main id="main"></main>\n'
            f'<script id="data" type="application/json">{payload}</script>\n'
            f'<script src="{root}static/label.js"></script></body></html>\n').encode()

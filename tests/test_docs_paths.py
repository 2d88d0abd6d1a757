"""The docs name only files and modules that exist: every `core/…`, `kernels/…`,
`cache/…`, `bench/…`, `tests/…` path in backticks and every `tension.…` module
path in README.md and docs/*.md resolves (a moved module cannot leave a stale
pointer behind)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`((?:core|kernels|cache|bench|tests|examples|bin)/[\w/.-]+?)(?:::[\w\[\]-]+)?`")
MODULE = re.compile(r"`(tension(?:\.\w+)+)")


def _mentions(pattern: re.Pattern) -> list[tuple[str, str]]:
    return [(doc.name, m) for doc in DOCS for m in pattern.findall(doc.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("doc,path", _mentions(PATH))
def test_named_file_exists(doc, path):
    assert (ROOT / path.rstrip("/")).exists(), f"{doc} names {path}, which does not exist"


@pytest.mark.parametrize("doc,name", _mentions(MODULE))
def test_named_module_or_attribute_resolves(doc, name):
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable prefix (`tension` itself too), then attributes
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            assert hasattr(obj, attr), f"{doc} names {name}: {'.'.join(parts[:cut])} has no {attr}"
            obj = getattr(obj, attr)
        return
    pytest.fail(f"{doc} names {name}, which does not import")

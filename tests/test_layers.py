"""The layers of core/ (docs/architecture.md), checked by reading the imports:
lower layers never import higher ones, no module imports another's private
names, and every package is listed in pyproject.toml (an installed copy would
miss an unlisted one, while a checkout would not notice). The test doubles,
tension.testing (tests/testing/), sit above them all: they may import any of
them, and nothing in core/, kernels/ or cache/ imports them."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# import package -> folder, as pyproject maps them (tension.testing -> tests/testing)
PACKAGE_DIR = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
PRODUCT = ("core", "kernels", "cache")  # the folders of the shipped code

# What each layer may import from tension (besides itself). Listed, not ranked, so
# that an allowed edge is a decision written here.
ALLOWED = {
    "kernels": set(),
    "cache": {"core.errors"},
    "core.errors": set(),
    "core.redact": set(),  # the one redactor of server text: whatever prints or stores it may use it
    "core.formats": {"core.errors"},
    "core.config": {"core.errors", "core.redact", "kernels", "core.llm"},
    "core.inputs": {"core.errors", "core.formats", "core.config", "core.prompts", "kernels"},
    "core.prompts": {"core.errors"},
    "core.llm": {"core.errors", "core.redact", "cache"},
    "core.run": {"core.errors", "core.redact", "cache", "core.llm", "core.inputs"},
    "core.reports": {"core.errors", "core.formats", "core.inputs", "kernels"},
    "core.serving": {"core.errors", "cache"},
    "core.pipelines": {"core.errors", "core.formats", "core.config", "core.inputs", "core.prompts", "core.llm",
                       "core.run", "core.reports", "cache", "kernels"},
    # the view reads run folders, reports and the cache; what it needs of a pipeline
    # (a run's request keys) the cli hands it as a recall factory
    "core.view": {"core.errors", "core.formats", "core.config", "core.inputs", "core.reports", "cache", "kernels"},
    "core.cli": {"core.errors", "core.redact", "core.config", "core.pipelines", "core.reports", "core.serving",
                 "core.inputs", "core.view", "cache", "kernels", "core.llm"},  # llm: `route` starts the vLLM router
}


def _layer(mod: str) -> str:
    """tension.core.llm.client -> core.llm; tension.kernels.curves -> kernels."""
    parts = mod.split(".")[1:]
    if parts[0] != "core":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 1 else "core"


def _module_name(path: Path) -> str:
    """core/llm/client.py -> tension.core.llm.client; tests/testing/corpus.py -> tension.testing.corpus."""
    rel = path.relative_to(ROOT).with_suffix("")
    for package, folder in PACKAGE_DIR.items():
        if rel.parts[:len(Path(folder).parts)] == Path(folder).parts:
            parts = [package, *rel.parts[len(Path(folder).parts):]]
            break
    else:
        raise AssertionError(f"{rel} is in no package of pyproject's package-dir")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tension."):
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tension."):
                    yield node.lineno, a.name, []


def _sources(folders=PRODUCT):
    for top in folders:
        yield from sorted((ROOT / top).rglob("*.py"))


def test_layers_import_only_what_they_may():
    bad = []
    for path in _sources():
        own = _layer(_module_name(path))
        for line, mod, _names in _imports(path):
            target = _layer(mod)
            if target != own and target not in ALLOWED[own] and not (own == "core" or target == "core"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod} ({own} may not import {target})")
    assert bad == []


def test_nothing_shipped_imports_the_test_doubles():
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}" for path in _sources()
           for line, mod, _names in _imports(path) if _layer(mod) == "testing"]
    assert bad == []


def test_the_test_doubles_import_only_the_project():
    """tension.testing may import core/, kernels/ and cache/ (no layer rule below it)."""
    layers = set(ALLOWED) | {"core", "testing"}
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}" for path in _sources([PACKAGE_DIR["tension.testing"]])
           for line, mod, _names in _imports(path) if _layer(mod) not in layers]
    assert bad == []


def test_no_module_imports_a_private_name_of_another():
    bad = []
    for path in _sources([*PRODUCT, PACKAGE_DIR["tension.testing"]]):
        for line, mod, names in _imports(path):
            if mod != _module_name(path):
                bad += [f"{path.relative_to(ROOT)}:{line} imports {mod}.{n}" for n in names if n.startswith("_")]
    assert bad == []


def test_every_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {_module_name(p.parent / "__init__.py") for top in PACKAGE_DIR.values()
             for p in (ROOT / top).rglob("__init__.py")}
    assert found == listed

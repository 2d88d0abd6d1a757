"""The layers of core/ (docs/architecture.md), checked by reading the imports:
lower layers never import higher ones, no module imports another's private
names, and every package is listed in pyproject.toml (an installed copy would
miss an unlisted one, while a checkout would not notice)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "tension." + ".".join(parts)


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tension."):
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tension."):
                    yield node.lineno, a.name, []


def _sources():
    for top in ("core", "kernels", "cache"):
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


def test_no_module_imports_a_private_name_of_another():
    bad = []
    for path in _sources():
        for line, mod, names in _imports(path):
            if mod != _module_name(path):
                bad += [f"{path.relative_to(ROOT)}:{line} imports {mod}.{n}" for n in names if n.startswith("_")]
    assert bad == []


def test_every_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {_module_name(p.parent / "__init__.py") for top in ("core", "kernels", "cache")
             for p in (ROOT / top).rglob("__init__.py")}
    assert found == listed

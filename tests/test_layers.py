"""The layers of core/ (docs/architecture.md), checked by reading the imports:
lower layers never import higher ones, no module imports another's private
names, and every package is listed in pyproject.toml (an installed copy would
miss an unlisted one, while a checkout would not notice). The test doubles,
tension.testing (tests/testing/), sit above them all: they may import any of
them, and nothing in core/, kernels/ or cache/ imports them."""

from __future__ import annotations

import ast
import functools
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
    # the one owner of stop signals (Ctrl-C, SIGTERM): whatever stops part-way uses it; redact: the resume
    # line of a stop while the command starts
    "core.signals": {"core.redact"},
    "core.formats": {"core.errors"},
    "core.config": {"core.errors", "core.redact", "kernels", "core.llm"},
    "core.inputs": {"core.errors", "core.formats", "core.config", "core.prompts", "core.signals", "kernels"},
    "core.prompts": {"core.errors"},
    "core.llm": {"core.errors", "core.redact", "cache"},
    "core.run": {"core.errors", "core.redact", "core.signals", "cache", "core.llm", "core.inputs"},
    # run: a run folder's run.json read back as the run record the run wrote (core/run/record.py RunRecord);
    # cache: its header's usage (cache/records.py Usage)
    "core.reports": {"core.errors", "core.formats", "core.inputs", "core.run", "cache", "kernels"},
    "core.serving": {"core.errors", "core.redact", "cache"},  # redact: the install log names pip's index URLs
    # redact: bench prints and saves its servers' URLs (issue 25: a URL's password reached stdout);
    # signals: the command line as the tool was called, which score's advice repeats (command_line)
    "core.pipelines": {"core.errors", "core.redact", "core.formats", "core.config", "core.inputs", "core.prompts",
                       "core.llm", "core.run", "core.reports", "core.signals", "cache", "kernels"},
    # the view reads run folders, reports and the cache; what it needs of a pipeline
    # (a run's request keys) the cli hands it as a recall factory
    "core.view": {"core.errors", "core.formats", "core.config", "core.inputs", "core.reports", "core.signals", "cache",
                  "kernels"},
    # the Python API (docs/python.md): the verbs over the pipelines and reports, below the CLI that calls it;
    # view: a result's view() serves its run (core/view/background.py); cache: the default cache's path,
    # which `out` may not be (N14)
    "core.api": {"core.errors", "core.redact", "core.config", "core.pipelines", "core.reports", "core.serving",
                 "core.inputs", "core.run", "core.view", "cache", "kernels"},
    "core.cli": {"core.errors", "core.redact", "core.signals", "core.config", "core.pipelines", "core.reports", "core.serving",
                 "core.inputs", "core.view", "cache", "kernels", "core.llm", "core.api"},  # llm: `route` starts the router
    # the package `tension` itself: the API's facade; signals: the command's handler, its first statement
    "core.tension": {"core.api", "core.errors", "core.signals"},
}


def _layer(mod: str) -> str:
    """tension.core.llm.client -> core.llm; tension.kernels.curves -> kernels."""
    parts = mod.split(".")[1:]
    if not parts:  # the package `tension` itself (core/tension/)
        return "core.tension"
    if parts[0] != "core":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 1 else "core"


def _module_name(path: Path) -> str:
    """core/llm/client.py -> tension.core.llm.client; tests/testing/corpus.py -> tension.testing.corpus."""
    rel = path.relative_to(ROOT).with_suffix("")
    # the deepest folder first: core/tension/ is the package `tension`, not tension.core.tension
    for package, folder in sorted(PACKAGE_DIR.items(), key=lambda kv: -len(Path(kv[1]).parts)):
        if rel.parts[:len(Path(folder).parts)] == Path(folder).parts:
            parts = [package, *rel.parts[len(Path(folder).parts):]]
            break
    else:
        raise AssertionError(f"{rel} is in no package of pyproject's package-dir")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@functools.cache
def _tree(path: Path) -> ast.Module:
    """`path`'s syntax tree, parsed once for the module's tests (they only read it)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path):
    tree = _tree(path)
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


def _functions(folder: str):
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield path, node


def test_llm_holds_no_part_of_a_run():
    """Issue 24: the request path goes down, never back up. No function of core/llm/
    takes the run's scheduler, committer or progress bar (not even untyped, by a
    name: the seam a type checker cannot follow), and none names their types."""
    run_parts = {"sched", "scheduler", "committer", "progress", "run", "engine"}
    for path, fn in _functions("core/llm"):
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        names = {a.arg for a in args}
        assert not names & run_parts, f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name} takes {names & run_parts}"
    for path in sorted((ROOT / "core" / "llm").rglob("*.py")):
        for node in ast.walk(_tree(path)):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            assert name not in ("Scheduler", "Committer", "Progress", "Engine"), \
                f"{path.relative_to(ROOT)}:{node.lineno} names {name}"


def test_a_runs_status_is_decided_in_one_place():
    """Issue 24: no code assigns a run's status; `Run.status` decides it from what
    happened (a cancellation, the first error). (An HTTP error's `status` in
    core/errors.py is another thing.)"""
    for folder in ("core/run", "core/pipelines", "core/cli", "core/view"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(_tree(path)):
                targets = (node.targets if isinstance(node, ast.Assign) else
                           [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
                for t in targets:
                    for leaf in ast.walk(t):
                        assert not (isinstance(leaf, ast.Attribute) and leaf.attr == "status"), \
                            f"{path.relative_to(ROOT)}:{node.lineno} assigns .status"


def test_no_call_site_hands_a_lambda_to_the_engine():
    """Issue 24: pipelines ask the engine typed methods; nothing passes a callback as
    the way to send."""
    asking = {"endings", "answer", "answers", "token_counts", "context_len", "one", "many", "chat", "chat_many"}
    for path in sorted((ROOT / "core").rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in asking:
                assert not any(isinstance(a, ast.Lambda) for a in [*node.args, *(k.value for k in node.keywords)]), \
                    f"{path.relative_to(ROOT)}:{node.lineno}"


LOOP_RUNNERS = {"run_blocking", "run", "run_until_complete"}  # run.blocking's, asyncio's, a loop's


def test_a_pipeline_has_no_blocking_twin_of_its_verb():
    """Issue 38: one public door per verb. A pipeline's verb is its coroutine
    (`run_score`, `run_estimate`, …: never the API's name, issue 59), which the API
    awaits (``tension.score``, ``tension.score_async``) and the CLI runs through
    the API; no public name of
    core/pipelines is a blocking twin beside it, neither named as a coroutine
    without its `_async` nor any function that runs an event loop itself."""
    bad = []
    for path in sorted((ROOT / "core" / "pipelines").rglob("*.py")):
        tree = _tree(path)
        top = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        exported = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                         and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)), [])
        public = {name for name in top if not name.startswith("_")} | set(exported)
        where = path.relative_to(ROOT)
        for name in sorted(public):
            if f"{name}_async" in top:
                bad.append(f"{where}: {name} is a blocking twin of {name}_async")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called in LOOP_RUNNERS and not (called == "run" and not (isinstance(f, ast.Attribute) and
                                                   isinstance(f.value, ast.Name) and f.value.id == "asyncio")):
                    bad.append(f"{where}:{node.lineno} runs an event loop ({called})")
    assert bad == []

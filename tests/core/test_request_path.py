"""The request path, engine → socket, read as code (issue 59): one typed request
goes down, answers come back; nothing is relayed, steered by ambient state or
called back up. docs/architecture.md "The request path" is what these hold.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LLM = sorted((ROOT / "core" / "llm").glob("*.py"))
# the floors a request crosses on its way down, and the pipelines that start it
PATH = LLM + [ROOT / "core" / "run" / f for f in ("engine.py", "scheduler.py", "reads.py", "commit.py")] + sorted(
    (ROOT / "core" / "pipelines").rglob("*.py"))


def _tree(p: pathlib.Path) -> ast.Module:
    return ast.parse(p.read_text(encoding="utf-8"), filename=str(p))


def _rel(p: pathlib.Path) -> str:
    return p.relative_to(ROOT).as_posix()


def test_no_module_on_the_request_path_relays_an_untyped_call():
    """No `fn(*args)`: a function calling one of its own parameters with a starred
    argument list forwards a call it cannot type (the old `Scheduler.request`)."""
    relays = []
    for p in PATH:
        for fn in ast.walk(_tree(p)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
            for call in ast.walk(fn):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in params
                        and any(isinstance(a, ast.Starred) for a in call.args)):
                    relays.append(f"{_rel(p)}:{call.lineno} {fn.name} calls {call.func.id}(*…)")
    assert relays == []


def test_no_request_scoped_context_variable_on_the_request_path():
    """What a request needs on its way down is its `Ticket`, an argument: no
    ContextVar carries a routing key, a place or a cache handle (the old ITEM_KEY,
    ORDER, PARTS)."""
    found = [f"{_rel(p)}:{n.lineno}" for p in PATH for n in ast.walk(_tree(p))
             if (isinstance(n, ast.Name) and n.id == "ContextVar")
             or (isinstance(n, ast.Attribute) and n.attr == "ContextVar")]
    assert found == []


def _imports(p: pathlib.Path) -> set[str]:
    out = set()
    for n in ast.walk(_tree(p)):  # lazy and TYPE_CHECKING imports included: a circle is a circle
        if isinstance(n, ast.ImportFrom) and n.module:
            if n.module == "tension.core.llm":
                out |= {a.name for a in n.names}
            elif n.module.startswith("tension.core.llm."):
                out.add(n.module.split(".")[3])
        elif isinstance(n, ast.Import):
            out |= {a.name.split(".")[3] for a in n.names if a.name.startswith("tension.core.llm.")}
    return out - {p.stem}


def test_no_import_circle_in_core_llm():
    graph = {p.stem: _imports(p) for p in LLM}
    circles = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                circles.append(" → ".join(path + [nxt]))
            elif nxt not in path:
                walk(start, nxt, path + [nxt])

    for m in graph:
        walk(m, m, [m])
    assert circles == []


def test_nothing_below_the_run_calls_back_into_it():
    """core/llm/ imports nothing of core/run/, and the engine hands the router no
    function of its own: no lambda, no local function, no bound method of the
    engine among the arguments of what it calls on a router, a client or the
    scheduler's slot (the pieces of an answer come back as values, `Piece`)."""
    up = [f"{_rel(p)}:{n.lineno}" for p in LLM for n in ast.walk(_tree(p))
          if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tension.core.run")]
    assert up == []
    engine = _tree(ROOT / "core" / "run" / "engine.py")
    local_fns = {n.name for n in ast.walk(engine) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    handed = []
    for call in ast.walk(engine):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            continue
        owner = call.func.value
        name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
        if name not in ("router", "client", "routers"):
            continue
        for a in [*call.args, *(k.value for k in call.keywords)]:
            if isinstance(a, ast.Lambda) or (isinstance(a, ast.Name) and a.id in local_fns) or (
                    isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self"
                    and a.attr in local_fns):
                handed.append(f"core/run/engine.py:{call.lineno} {ast.unparse(a)}")
    assert handed == []


@pytest.mark.parametrize("module", ["scheduler", "capacity", "schedule"])
def test_one_weighted_slot_rule(module):
    """The run's lanes, a server's capacity and the prefix simulator's lanes hand out
    room by one rule, core/llm/slots.py: none keeps a waiting line of its own."""
    path = {"scheduler": ROOT / "core" / "run" / "scheduler.py", "capacity": ROOT / "core" / "llm" / "capacity.py",
            "schedule": ROOT / "core" / "pipelines" / "prefix" / "schedule.py"}[module]
    text = path.read_text(encoding="utf-8")
    assert "SlotQueue" in text or "Slots" in text
    assert "heapq" not in text and "deque" not in text


def test_one_public_door_per_verb():
    """The API's names are its own: no public function of core/pipelines is named as
    an API verb (two public `score_async` with different signatures, issue 59), and
    bench has its door (`tension.bench`, which the CLI's verb calls)."""
    import tension

    clash = []
    for path in sorted((ROOT / "core" / "pipelines").rglob("*.py")):
        top = {n.name for n in _tree(path).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        clash += [f"{_rel(path)}: {name}" for name in sorted(top & set(tension.__all__))]
    assert clash == []
    assert {"bench", "bench_async", "BenchResult"} <= set(tension.__all__)
    cli = (ROOT / "core" / "cli" / "score.py").read_text(encoding="utf-8")
    assert "pipelines.bench" not in cli  # through the API


def test_one_walk_of_adaptive_rounds():
    """The live run, the cache reader and `estimate` walk a position's rounds through
    core/pipelines/score/round_walk.py alone: no other module of core/ applies the
    stopping rule (`should_stop`) or builds a round's request."""
    outside = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        if _rel(path) == "core/pipelines/score/round_walk.py":
            continue
        for node in ast.walk(_tree(path)):
            name = node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else (
                node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None)
            if name in ("should_stop", "endings_round"):
                outside.append(f"{_rel(path)}:{node.lineno} {name}")
    assert outside == []


def test_the_client_asks_no_kind_endpoint_itself():
    """What a listing teaches of a server's kind (llama.cpp's /props, llama-cpp-python's
    counter) is core/llm/listing.py's: the client's module holds endpoints only."""
    text = (ROOT / "core" / "llm" / "client.py").read_text(encoding="utf-8")
    assert "/props" not in text and "kind_probe" not in text and "learn_kind" in text


def test_a_servers_metrics_are_read_in_one_place():
    """A server's /metrics counters come through `Client.metrics` (bench's phases, the
    router's hit rates): no pipeline asks for the endpoint itself."""
    asking = [_rel(p) for p in sorted((ROOT / "core" / "pipelines").rglob("*.py"))
              if '"/metrics"' in p.read_text(encoding="utf-8")]
    assert asking == []


def test_what_a_run_knows_of_a_server_is_on_its_record():
    """Server knowledge lives on the `Server` record (core/llm/servers.py): no module on the
    request path keeps a registry of its own keyed by server (a module-level dict or weak
    dict beside the record: the seed probe's `_STATE` was one), which outlives the run and
    is shared by every run in the process."""
    registries = []
    for p in PATH:
        for node in _tree(p).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            call = value.func if isinstance(value, ast.Call) else None
            name = call.attr if isinstance(call, ast.Attribute) else (call.id if isinstance(call, ast.Name) else "")
            if name in ("WeakKeyDictionary", "WeakValueDictionary", "defaultdict") or (
                    isinstance(node, ast.AnnAssign) and "Server" in ast.unparse(node.annotation)):
                registries.append(f"{_rel(p)}:{node.lineno} {ast.unparse(node)[:60]}")
    assert registries == []

"""One server, one record (issue 35): what a run knows of a server is kept under
one key (`server_key`: the base URL normalised, credentials dropped, host
lower-cased, path kept) in one `Server` record, reached by `Client.server(url)`.
Before, traits were written under one key and read under another, so a hosted
gateway's base URL (a path prefix), one with credentials or an upper-case host
lost every trait the server taught."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import tension
from tension.core.llm.client import Client
from tension.core.llm.servers import server_key
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, LoopbackServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("url", ["http://h:8080", "http://h:8080/", "http://h:8080/v1", "http://u:p@h:8080",
                                 "http://H:8080/v1/", "HTTP://u@H:8080"])
def test_every_spelling_of_one_server_is_one_key(url):
    assert server_key(url) == "http://h:8080"


def test_a_gateway_path_is_part_of_the_key():
    assert server_key("https://U:P@GW.example/api/v1") == "https://gw.example/api"
    assert server_key("https://gw.example/api/v1") != server_key("https://gw.example/other/v1")
    assert server_key("http://[::1]:8000/v1") == "http://[::1]:8000"


def test_a_gateway_url_with_a_path_credentials_and_an_upper_case_host_keeps_every_trait(tmp_path):
    """The llama.cpp server's slots, its n limit and its constraint form, learned from
    /v1/models and /props, reach the requests: n asked in chunks of its slots up
    front (no 400 to learn it again), the judge's choice sent as its grammar, and
    never more sequences at once than its slots; run.json has one record for it,
    without the credentials."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    with LoopbackServer(model="test-gen", dialect="llamacpp", slots=4, prefix="/api", delay=0.01) as srv:
        url = f"http://user:secret@LOCALHOST:{srv.port}/api/v1"
        s = tension.score(corpus, out=tmp_path / "out", base_url=url, model="test-gen", cache=str(tmp_path / "cache"),
                          endings=8, progress=False, seed=7, judge_constraint="choice").summary
        chats = [r for r in srv.requests if r.path == CHAT_PATH]
        peak = srv.peak_slots
    assert s.status == "complete", s.error
    gens = [r.body for r in chats if r.kind == "generation"]
    judges = [r.body for r in chats if r.kind == "judge"]
    assert gens and all(b["n"] <= 4 for b in gens)
    assert all(r.status == 200 for r in chats)  # the slots were known: no 400 taught them again
    assert judges and all("grammar" in b and "structured_outputs" not in b for b in judges)
    assert peak <= 4
    rec = json.loads((tmp_path / "out" / "run.json").read_text())
    (server,) = rec["servers"]
    assert server["url"] == f"http://localhost:{srv.port}/api" and "secret" not in json.dumps(rec)
    assert (server["kind"], server["slots"], server["max_n"], server["constraint"]) == ("llamacpp", 4, 4, "grammar")
    assert server["max_n_from"].startswith("slots") and server["capacity"]["ceiling"] == 4


# -- the only way in -------------------------------------------------------------------

# What the client used to keep of servers in dicts of its own, and what read them.
_OLD_SPLIT = {"owners", "names", "suspects", "max_model_len", "_overlong", "traits", "listed", "owned_by",
              "_capacity", "_unsure", "_path_models", "of"}


def _modules():
    for path in sorted((ROOT / "core").rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _is_client(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in ("client", "c")) or (
        isinstance(node, ast.Attribute) and node.attr in ("client", "_client"))


def test_what_is_known_of_a_server_is_reached_only_through_its_key_and_record():
    """One key function builds a server's identity from its URL (the only code that
    reads a URL's host, but for the display form of the early-stop
    message), and nothing outside core/llm/client.py reaches past `Client.server`:
    no client dict of servers is read or written, and the registry is only asked
    for run.json's record."""
    keyers, reaches = [], []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and ("root" in node.name or "normalize" in node.name) and (
                    "url" in node.name or "server" in node.name):
                keyers.append(f"{name}:{node.lineno} def {node.name}")
            # core/view/app.py reads web origins (the notebook that may frame the view), not servers
            if isinstance(node, ast.Attribute) and node.attr in ("hostname", "netloc") and name not in (
                    "core/llm/server_keys.py", "core/pipelines/score/watch.py", "core/view/app.py"):
                keyers.append(f"{name}:{node.lineno} .{node.attr}")
            if name == "core/llm/client.py" or not isinstance(node, ast.Attribute) or not _is_client(node.value):
                continue
            if node.attr in _OLD_SPLIT:
                reaches.append(f"{name}:{node.lineno} client.{node.attr}")
        for node in ast.walk(tree):  # client.servers: only ever .record()
            if (name != "core/llm/client.py" and isinstance(node, ast.Attribute) and node.attr == "servers"
                    and _is_client(node.value)):
                parent = next((p for p in ast.walk(tree) if isinstance(p, ast.Attribute) and p.value is node), None)
                if parent is None or parent.attr != "record":
                    reaches.append(f"{name}:{node.lineno} client.servers")
    assert keyers == [], "a second way to name a server: use core/llm/servers.py server_key"
    assert reaches == [], "reach what is known of a server through Client.server(url)"


def test_the_client_keeps_no_table_of_servers_of_its_own():
    c = Client()
    tables = [k for k, v in vars(c).items() if isinstance(v, (dict, set, list))]
    assert tables == []
    assert c.server("http://U:P@H:1/v1") is c.server("http://h:1")

"""A model id that is a file's path names the server's own way out (issue 61, L1 of
../shared/reviews/external-servers-2026-12-07.md): the warning named only llama.cpp's
alias flags, which transformers serve (its id is its argument as typed) and FastChat
(the folder's name, or its model worker's --model-names) do not have, nor vLLM
(--served-model-name). Each server here is the loopback server saying what that
server's /v1/models says of itself (owned_by)."""

from __future__ import annotations

import pytest

from tension.core.cli import main
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

PATH = "/home/someone/models/SmolLM2-135M-Instruct"
SAID = "the model id is a file path"
# each server's own way, as the warning words it
WAYS = {"vllm": "vLLM's --served-model-name NAME", "llamacpp": "llama-server's --alias NAME",
        "llamacpp_python": "llama-cpp-python's --model_alias NAME", "fastchat": "--model-names NAME",
        "transformers": "`transformers serve NAME`"}


def _warning(tmp_path, capsys, *model: str, **server) -> str:
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    with LoopbackServer(model=PATH, **server) as srv:
        rc = main(["score", str(corpus), "--out", str(tmp_path / "o"), "--base-url", srv.base_url, *model,
                   "--cache", str(tmp_path / "cache"), "--endings", "2", "--seed", "1", "--no-progress",
                   "--no-report", "--judge-batch", "off"])
    err = capsys.readouterr().err
    assert rc == 0, err
    (line,) = [x for x in err.splitlines() if SAID in x]  # said once
    return line


@pytest.mark.parametrize(("server", "kind"), [
    ({"owned_by": "vllm"}, "vllm"),
    ({"owned_by": "fastchat"}, "fastchat"),
    ({"dialect": "llamacpp"}, "llamacpp"),
    ({"dialect": "llamacpp_python"}, "llamacpp_python"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_known_server_is_told_its_own_way_only(tmp_path, capsys, server, kind):
    line = _warning(tmp_path, capsys, **server)
    assert WAYS[kind] in line, line
    assert all(way not in line for other, way in WAYS.items() if other != kind), line
    if kind == "fastchat":
        assert "folder's name" in line


@pytest.mark.parametrize("server", [{"owned_by": "local"}, {"owned_by": "fastchat"}], ids=["local", "model given"])
def test_a_server_not_told_apart_is_told_every_way(tmp_path, capsys, server):
    """transformers serve says owned_by "local", which is not its own (kind other); a
    --model given on one server is used without listing its models, so nothing tells."""
    model = ("--model", PATH) if server["owned_by"] == "fastchat" else ()
    line = _warning(tmp_path, capsys, *model, **server)
    assert all(way in line for way in WAYS.values()), line
    assert "start it from the model's parent folder" in line  # transformers serve's id: its argument as typed

"""How each server lets its model be named by something other than a file's path.

A server that lists its model under an absolute path (llama-server without an alias,
`vllm serve /models/x`, `transformers serve /abs/x`) puts that path into the cache
keys, run.json and every export, and moving the file makes every cached answer a
miss. The way out is the server's own, and servers differ (issue 61, L1 of
../shared/reviews/external-servers-2026-12-07.md): llama.cpp's alias flags do not
exist on transformers serve, whose id is its argument as typed, nor on FastChat,
whose model worker names the model by its folder. `way_to_name` picks the server's
own way where its kind is known (core/llm/traits.py, or an owned_by only that server
says), and lists them all where it is not.
"""

from __future__ import annotations

__all__ = ["WAYS", "way_to_name"]

# Each server's way to serve a model under a NAME, as its documentation and the reviews have it.
WAYS: dict[str, str] = {
    "vllm": "vLLM's --served-model-name NAME",
    "llamacpp": "llama-server's --alias NAME",
    "llamacpp_python": "llama-cpp-python's --model_alias NAME",
    "fastchat": "FastChat's model worker names it by its folder's name, or by its --model-names NAME",
    "transformers": "transformers serve names it by its argument as typed: start it from the model's parent "
                    "folder as `transformers serve NAME`",
}
# /v1/models owned_by that tells a server the traits leave `other`: FastChat's API server says
# "fastchat" of every model (its ModelCard's default). transformers serve's "local" is not its
# own (mistral.rs says it too), so it does not tell.
_OWNERS = {"fastchat": "fastchat"}


def way_to_name(kind: str, owned_by: str | None) -> str:
    """The server's own way to serve its model under a name (its `kind`, else what its
    `owned_by` tells), or every known way, one after another, where neither tells."""
    known = kind if kind in WAYS else _OWNERS.get(owned_by or "")
    if known is not None:
        return WAYS[known]
    return "; ".join(WAYS.values())

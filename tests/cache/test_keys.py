"""Cache keys: blake2b-128 of the canonical (sorted) msgpack, with an algorithm byte."""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from tension.cache import keys as keys_mod
from tension.cache.keys import KEY_ALGO_BLAKE2B_128, KEY_SIZE, canonical, request_key
from tension.core.llm.protocol import ChatRequest

MESSAGES = [
    {"role": "system", "content": "You are a literary judge."},
    {"role": "user", "content": "BEGIN CONTINUATION It rained. END CONTINUATION"},
]


def base() -> dict:
    return {"model": "qwen", "messages": [dict(m) for m in MESSAGES], "n": 100, "temperature": 1.2,
            "top_p": 0.95, "max_tokens": 150, "seed": 1}


def test_all_is_exported():
    for name in keys_mod.__all__:
        assert hasattr(keys_mod, name), name


def test_size_and_algorithm_prefix():
    k = request_key("chat", base())
    assert isinstance(k, bytes)
    assert len(k) == KEY_SIZE == 17
    assert k[:1] == KEY_ALGO_BLAKE2B_128 == b"\x01"
    assert k[0] == 0x01


def test_key_is_blake2b_128_of_the_canonical_msgpack():
    req = base()
    expected = hashlib.blake2b(canonical(["chat", req]), digest_size=16).digest()
    assert request_key("chat", req) == b"\x01" + expected


def test_canonical_sorts_keys_at_every_level():
    a = {"b": 1, "a": {"y": 2, "x": [{"q": 1, "p": 2}]}}
    b = {"a": {"x": [{"p": 2, "q": 1}], "y": 2}, "b": 1}
    assert list(a) != list(b)
    assert canonical(a) == canonical(b)
    assert msgspec.msgpack.decode(canonical(a)) == a
    # sorted: the encoding of `b`'s keys comes out alphabetically
    assert canonical({"b": 1, "a": 2}) == msgspec.msgpack.encode({"a": 2, "b": 1})


def test_dict_key_order_does_not_matter():
    a = base()
    b = dict(reversed(list(a.items())))
    b["messages"] = [dict(reversed(list(m.items()))) for m in a["messages"]]
    assert list(a) != list(b)
    assert list(a["messages"][0]) != list(b["messages"][0])
    assert request_key("chat", a) == request_key("chat", b)


def test_same_request_same_key_across_calls():
    assert request_key("chat", base()) == request_key("chat", base())


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(model="qwen2"),
        lambda r: r.update(temperature=1.3),
        lambda r: r.update(temperature=0.0),
        lambda r: r.update(top_p=0.9),
        lambda r: r.update(max_tokens=151),
        lambda r: r.update(n=99),
        lambda r: r.update(seed=2),
        lambda r: r.update(seed=None),
        lambda r: r.pop("seed"),
        lambda r: r["messages"][1].update(content=r["messages"][1]["content"] + " "),
        lambda r: r["messages"][0].update(role="user"),
        lambda r: r["messages"].reverse(),
        lambda r: r["messages"].pop(),
        lambda r: r.update(chat_template_kwargs={"enable_thinking": False}),
    ],
    ids=["model", "temperature", "temperature0", "top_p", "max_tokens", "n", "seed", "seed-null",
         "seed-absent", "message-text", "message-role", "message-order", "message-missing", "extra-field"],
)
def test_any_change_gives_a_different_key(change):
    r = base()
    change(r)
    assert r != base()
    assert request_key("chat", r) != request_key("chat", base())


def test_kind_separates_equal_bodies():
    body = {"model": "qwen", "prompt": "Hi, you."}
    assert request_key("chat", body) != request_key("tokenize", body)
    assert request_key("chat", body) != request_key("chat ", body)


def test_no_collisions_over_many_requests():
    ks = {request_key("chat", {**base(), "seed": s}) for s in range(2000)}
    assert len(ks) == 2000


def test_chat_request_struct_and_its_key_fields_hash_alike():
    kw = dict(model="qwen", messages=MESSAGES, n=3, temperature=0.0, max_tokens=10)
    req = ChatRequest(**kw)
    as_dict = dict(reversed(list(kw.items())))
    assert request_key("chat", req.key_fields()) == request_key("chat", as_dict)
    assert request_key("chat", req) == request_key("chat", req.key_fields())
    # fields left at None are not part of the key (they are not sent either)
    assert "seed" not in req.key_fields()
    assert request_key("chat", ChatRequest(**kw, seed=5).key_fields()) != request_key("chat", req.key_fields())


def test_n_is_part_of_the_key_even_when_1():
    one = ChatRequest(model="qwen", messages=MESSAGES, n=1)
    assert one.key_fields()["n"] == 1
    assert request_key("chat", one.key_fields()) != request_key(
        "chat", {"model": "qwen", "messages": MESSAGES})

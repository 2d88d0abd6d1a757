"""Cache keys: a fixed-size hash of the canonical msgpack of the exact request.

The canonical form sorts map keys, so two requests that differ only in the order
their fields were built hash the same, and any change of model, parameter or
rendered message hashes differently. The first byte names the algorithm, so a
later change of hash can live beside old entries instead of misreading them.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

__all__ = ["KEY_ALGO_BLAKE2B_128", "KEY_SIZE", "canonical", "request_key"]

KEY_ALGO_BLAKE2B_128 = b"\x01"
KEY_SIZE = 17

_encoder = msgspec.msgpack.Encoder(order="sorted")


def canonical(obj: Any) -> bytes:
    return _encoder.encode(obj)


def request_key(kind: str, request: Any) -> bytes:
    """Key of one request. `kind` separates request types that could share a body
    (e.g. "chat" and "tokenize"); `request` must hold everything that decides the
    answer (model id, sampling parameters, messages, n) and nothing else — never
    the base URL (replicas share answers) and never an API key.

    A msgspec Struct may be passed as it is: the sorted encoder writes its fields
    (defaults omitted) exactly as it writes their `msgspec.to_builtins` dict, so
    the key is the same and the copy is saved (tests/cache/test_keys.py)."""
    h = hashlib.blake2b(canonical([kind, request]), digest_size=16)
    return KEY_ALGO_BLAKE2B_128 + h.digest()

"""How a record's msgpack is stored compressed: zstd (level 3), small records against a
fixed dictionary.

An Endings record (≈ 30–60 KB of prose) shrinks ≈ 2.5× with zstd; a verdict (≈ 160 B)
does not shrink at all on its own, and the 100 verdicts of a position are a third of a
cache. Most of a small record is its field names and their usual values, so a record
under `SMALL` bytes is compressed against `_DICTIONARY`, a zstd raw-content dictionary
made of the msgpack of one record of each kind: a verdict then takes ≈ 46 B. A large
one is compressed without it: with the dictionary attached zstd keeps the parameters
it chose for small inputs, and an Endings record came out 7 % larger (bench/RESULTS.md).

The dictionary is part of the stored format: a record compressed with it can only be
read with exactly these bytes. It is frozen here as bytes (not built from the record
Structs, which may gain fields), `tests/cache/test_records.py` pins its hash, and a
different one must come with a new codec byte (`records.py`) beside this one.

zstandard's compressor and decompressor objects must not be used by two threads at
once (a run reads on its loop thread while its committer writes on another): each
thread makes its own.
"""

from __future__ import annotations

import threading

import zstandard

__all__ = ["LEVEL", "SMALL", "with_dictionary", "compress", "decompress", "CodecError"]

LEVEL = 3  # zstd's default: level 1 is as fast and 5 % larger, 19 gains 9 % for 15× the write time (RESULTS.md)
SMALL = 4096  # msgpack bytes below which the dictionary is used

# The msgpack of a TokenCount, a JudgedPosition, an Endings without texts, a Verdict
# with logprobs and one without (the most frequent record last: zstd reaches the end
# of a dictionary with the shortest offsets).
_DICTIONARY = (
    b"\x84\xa4type\xa6tokens\xa5count\xcd\x03\xe8\xa5model\xaeQwen/Qwen3-32B\xa7created\xcbA\xd9T\xfc@\x00"
    b"\x00\x00\x86\xa4type\xa6judged\xa5texts\x92\xa1Y\xa1N\xaefirst_logprobs\x91\x82\xa1Y\xcb\xbf\xb9\x99"
    b"\x99\x99\x99\x99\x9a\xa1N\xcb\xc0\x03333333\xa5usage\x84\xadprompt_tokens\xcd\x0b\xb8\xb1completion_"
    b"tokens\x01\xadcached_tokens\xcd\t`\xa8requests\x01\xa6judgedd\xa7created\xcbA\xd9T\xfc@\x00\x00\x00"
    b"\x87\xa4type\xa7endings\xa5texts\x90\xaefinish_reasons\x92\xa4stop\xa6length\xa5model\xaeQwen/Qwen3-"
    b"32B\xa5usage\x84\xadprompt_tokens\xcd\x0b\xb8\xb1completion_tokens\x01\xadcached_tokens\xcd\t`\xa8re"
    b"quests\x01\xa7created\xcbA\xd9T\xfc@\x00\x00\x00\xa7seconds\xcb@)\x00\x00\x00\x00\x00\x00\x88\xa4typ"
    b"e\xa7verdict\xa4text\xa1N\xadfinish_reason\xa4stop\xa5model\xadQwen/Qwen3-8B\xa5usage\x84\xadprompt_"
    b"tokens\xcd\x0b\xb8\xb1completion_tokens\x01\xadcached_tokens\xcd\t`\xa8requests\x01\xa7created\xcbA"
    b"\xd9T\xfc@\x00\x00\x00\xa7seconds\xcb?\xd9\x99\x99\x99\x99\x99\x9a\xaefirst_logprobs\x84\xa1Y\xcb"
    b"\xbf\xb9\x99\x99\x99\x99\x99\x9a\xa1N\xcb\xc0\x03333333\xa3Yes\xcb\xc0\x14\x00\x00\x00\x00\x00\x00"
    b"\xa2No\xcb\xc0\x18ffffff\x87\xa4type\xa7verdict\xa4text\xa1Y\xadfinish_reason\xa4stop\xa5model\xadQw"
    b"en/Qwen3-8B\xa5usage\x84\xadprompt_tokens\xcd\x0b\xb8\xb1completion_tokens\x01\xadcached_tokens\xcd"
    b"\t`\xa8requests\x01\xa7created\xcbA\xd9T\xfc@\x00\x00\x00\xa7seconds\xcb?\xd9\x99\x99\x99\x99\x99"
    b"\x9a"
)
_DICT = zstandard.ZstdCompressionDict(_DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
_local = threading.local()

CodecError = zstandard.ZstdError


def _compressor(small: bool) -> zstandard.ZstdCompressor:
    name = "small" if small else "large"
    c = getattr(_local, name, None)
    if c is None:
        # no checksum of zstd's own (the record frame has its CRC-32) and no dictionary id
        # (a raw-content dictionary has none); the content size stays, so a read knows it
        c = zstandard.ZstdCompressor(level=LEVEL, dict_data=_DICT if small else None, write_checksum=False,
                                     write_dict_id=False)
        setattr(_local, name, c)
    return c


def _decompressor(small: bool) -> zstandard.ZstdDecompressor:
    name = "unpack_small" if small else "unpack_large"
    d = getattr(_local, name, None)
    if d is None:
        d = zstandard.ZstdDecompressor(dict_data=_DICT if small else None)
        setattr(_local, name, d)
    return d


def with_dictionary(size: int) -> bool:
    """Whether msgpack of `size` bytes is compressed against the dictionary."""
    return size < SMALL


def compress(data: bytes | bytearray | memoryview, dictionary: bool) -> bytes:
    return _compressor(dictionary).compress(data)


def decompress(data: bytes | memoryview, dictionary: bool) -> bytes:
    """The bytes `compress` was given (with the same `dictionary`); CodecError when
    `data` is not such a frame."""
    return _decompressor(dictionary).decompress(data)

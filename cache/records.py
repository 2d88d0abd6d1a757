"""What the cache stores: one msgpack record per completed request.

A record is written once, after the answer is complete (all n choices), and never
changed. New fields get defaults and a field's type never changes, so older
records stay readable (msgspec schema evolution); a new field a release must write
for the cache to keep its promises (the links of verdicts to their endings, issue
36) comes with a format (cache/store.py `FORMAT_VERSION`).

A stored value is framed with a checksum: the byte 0xC1, the CRC-32 of the
msgpack (4 bytes, little-endian), the msgpack. msgpack never uses 0xC1, so a
value written before checksums existed (plain msgpack, a map) is told apart by
its first byte and still read, with only its decoding to vouch for it. CRC-32
(zlib) costs ≈ 30 µs on a 60 KB Endings record, ≈ 0.2 µs on a verdict
(bench/RESULTS.md); xxhash is not a dependency.

Since issue 28 the msgpack is stored compressed (`codec.py`: zstd with a fixed
dictionary), behind a codec byte: the frame is 0xC1, the CRC-32 of what follows,
then either

- a msgpack map (0x80–0x8F, 0xDE, 0xDF: a record is always a map), the record
  uncompressed: every value framed before compression existed, and a record that
  compression would not shrink; or
- `ZSTD` (0x01), then the zstd frame of the msgpack (a large record); or
- `ZSTD_DICT` (0x02), then the zstd frame of the msgpack compressed against the
  codec's dictionary (a small record: a verdict, a token count).

A record's msgpack never starts with 0x01 or 0x02, so the byte after the CRC tells
them apart, and the CRC covers the codec byte: a damaged value is found before it
is decompressed. Cache keys do not change; a cache may hold every form at once.
"""

from __future__ import annotations

import hashlib
import struct
import zlib

import msgspec

from . import codec

__all__ = ["Usage", "Endings", "Verdict", "JudgedPosition", "TokenCount", "Record", "DamagedRecord", "CHECKED",
           "ZSTD", "ZSTD_DICT", "encode", "decode", "is_checked", "is_compressed", "ending_link", "endings_link"]


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0
    # of `requests`, those whose answer did not report cached prompt tokens (no
    # usage.prompt_tokens_details.cached_tokens: transformers serve, FastChat, llama.cpp), so
    # their 0 in `cached_tokens` is no count (issue 61). 0 where every one reported them: such
    # a record keeps the bytes it had before this field, and one written before reads as reported
    cached_unreported: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.requests += other.requests
        self.cached_unreported += other.cached_unreported

    @property
    def cached_reported(self) -> bool:
        """Some answer counted here reported its cached prompt tokens (or none was
        counted): `cached_tokens` is a count, not a 0 for want of one."""
        return self.requests == 0 or self.cached_unreported < self.requests


class Endings(msgspec.Struct, tag="endings", kw_only=True, omit_defaults=True, gc=False):
    """The n endings of one generation request (possibly completed by follow-ups)."""

    texts: list[str]
    finish_reasons: list[str | None]
    model: str  # as the server reported it
    usage: Usage
    created: float  # unix time the record was completed
    seconds: float = 0.0  # wall time spent on the request(s)
    # the model the request asked for (`cache drop --model` matches it; a server may answer
    # under another name: an alias, vLLM's --served-model-name, a proxy). "": written before
    # issue 58, when only `model` was kept
    asked: str = ""


class Verdict(msgspec.Struct, tag="verdict", kw_only=True, omit_defaults=True, gc=False):
    """One judge answer, raw; parsed when used so a rerun can parse differently."""

    text: str
    finish_reason: str | None
    model: str
    usage: Usage
    created: float
    seconds: float = 0.0
    first_logprobs: dict[str, float] | None = None  # top log-probabilities of the first token
    # the ending it judged (`ending_link`; format 3): `cache merge` leaves out the verdicts
    # of endings it does not keep. b"": not an ending's verdict (a reader's answer), or
    # written before format 3. Stored as "of" (the codec's dictionary does not hold the
    # name: a compressed verdict takes ≈ 15 bytes more, 27 → 43, where "of_ending" took 23)
    of_ending: bytes = msgspec.field(default=b"", name="of")
    asked: str = ""  # the model the request asked for, as Endings' ("": written before issue 58)


class JudgedPosition(msgspec.Struct, tag="judged", kw_only=True, omit_defaults=True, gc=False):
    """The n judge answers of one position, raw and in ending order, written once
    every one of them is known: a rerun reads them with one lookup instead of n
    verdict keys. It is a summary of the `Verdict` records, which stay the truth:
    without it the pipeline reads those."""

    texts: list[str | None]  # the judge's answer per ending; None for an empty ending (never sent)
    first_logprobs: list[dict[str, float] | None] = []  # per ending, when the judge returned logprobs
    usage: Usage  # summed over the verdicts
    judged: int  # verdicts it stands for (non-empty endings)
    created: float
    of_endings: bytes = msgspec.field(default=b"", name="of")  # the endings it judged (`endings_link`; format 3)
    asked: str = ""  # the judge model its requests asked for ("": written before issue 58, names none)


class TokenCount(msgspec.Struct, tag="tokens", kw_only=True, omit_defaults=True, gc=False):
    count: int
    model: str
    created: float


Record = Endings | Verdict | JudgedPosition | TokenCount

# The links from a verdict or judged record to what it judged (issue 36, M4): a verdict's
# key is its judge request's, from which no one can tell its ending, so after a conflict
# of endings `cache merge` could not tell the losing source's verdicts from the others.
# A link is a keyed hash (8 bytes) of the endings record's key and the ending's text, or
# the texts of all of them: the same ending of the same record, the same link.
_LINK = 8
_link_encoder = msgspec.msgpack.Encoder()


def ending_link(endings_key: bytes, text: str) -> bytes:
    """The link of the verdict of ending `text` of the endings record at `endings_key`."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_LINK, key=endings_key,
                           person=b"ending").digest()


def endings_link(endings_key: bytes, texts: list[str]) -> bytes:
    """The link of the judged record of the endings `texts` of the record at `endings_key`."""
    return hashlib.blake2b(_link_encoder.encode(texts), digest_size=_LINK, key=endings_key,
                           person=b"endings").digest()

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


CHECKED = 0xC1  # first byte of a value with a checksum; msgpack never uses it
ZSTD = 0x01  # after the CRC: the zstd frame of the msgpack follows (codec.py)
ZSTD_DICT = 0x02  # … compressed against codec's dictionary
_FRAME = 5  # CHECKED, CRC-32
_CRC = struct.Struct("<I")


class DamagedRecord(ValueError):
    """A stored value whose checksum does not match, or that does not decode."""


def encode(record: Record, compress: bool = True) -> bytearray:
    """The stored value of `record`: the frame, then the msgpack compressed (when
    that is shorter), or as it is (`compress=False`: as written before issue 28;
    the msgpack is encoded in place, so a 60 KB record is not copied to prepend
    five bytes)."""
    buf = bytearray(_FRAME)
    _encoder.encode_into(record, buf, _FRAME)
    if compress:
        size = len(buf) - _FRAME
        small = codec.with_dictionary(size)
        packed = codec.compress(memoryview(buf)[_FRAME:], small)
        if len(packed) + 1 < size:
            del buf[_FRAME:]
            buf.append(ZSTD_DICT if small else ZSTD)
            buf += packed
    buf[0] = CHECKED
    _CRC.pack_into(buf, 1, zlib.crc32(memoryview(buf)[_FRAME:]))
    return buf


def is_checked(data: bytes | memoryview) -> bool:
    """Whether a stored value carries a checksum (written since checksums exist)."""
    return len(data) > 0 and data[0] == CHECKED


def is_compressed(data: bytes | memoryview) -> bool:
    """Whether a stored value holds its msgpack compressed."""
    return len(data) > _FRAME and data[0] == CHECKED and data[_FRAME] in (ZSTD, ZSTD_DICT)


def decode(data: bytes | memoryview) -> Record:
    """The record of a stored value, with or without a checksum; DamagedRecord when
    the checksum does not match or the bytes are not a record. (Written for speed:
    a rerun decodes every record it uses.)"""
    try:
        if data[0] == CHECKED:
            payload = data[_FRAME:]
            want, got = _CRC.unpack_from(data, 1)[0], zlib.crc32(payload)
            if want != got:
                raise DamagedRecord(f"checksum mismatch (stored {want:08x}, computed {got:08x})")
            if payload[0] in (ZSTD, ZSTD_DICT):
                payload = codec.decompress(payload[1:], payload[0] == ZSTD_DICT)
        else:
            payload = data
        return _decoder.decode(payload)
    except (IndexError, struct.error) as e:
        raise DamagedRecord(f"a value of {len(data)} bytes is too short for a record") from e
    except msgspec.DecodeError as e:  # ValidationError is a DecodeError
        raise DamagedRecord(f"not a record: {e}") from e
    except codec.CodecError as e:  # (the CRC matched: written so by something else than encode)
        raise DamagedRecord(f"the compressed record does not decompress: {e}") from e

"""A usage record tells "the server reported 0 cached prompt tokens" from "the server
did not report them" (issue 61: transformers serve, FastChat and llama.cpp send no
``prompt_tokens_details``, and bench printed "cached_tokens share 0.0%"): the
requests whose answers did not report them are counted (`Usage.cached_unreported`),
and a record where they were reported keeps the bytes it had before that count
existed, as records written before it read as reported."""

from __future__ import annotations

import msgspec

from tension.cache import records
from tension.cache.records import Usage, Verdict


class UsageBefore(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """`Usage` as it was before issue 61: its fields, in its order."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0


def test_a_reported_usage_keeps_the_bytes_it_had_before():
    for old, new in [(UsageBefore(prompt_tokens=3012, completion_tokens=1, cached_tokens=2400, requests=1),
                      Usage(prompt_tokens=3012, completion_tokens=1, cached_tokens=2400, requests=1)),
                     (UsageBefore(prompt_tokens=40, completion_tokens=3, requests=1),  # reported 0
                      Usage(prompt_tokens=40, completion_tokens=3, requests=1))]:
        assert msgspec.msgpack.encode(new) == msgspec.msgpack.encode(old)
        assert msgspec.json.encode(new) == msgspec.json.encode(old)  # run.json's usage too


def test_a_record_written_before_reads_as_reported():
    old = msgspec.msgpack.encode(UsageBefore(prompt_tokens=7, requests=1))
    got = msgspec.msgpack.decode(old, type=Usage)
    assert got.cached_unreported == 0 and got.prompt_tokens == 7


def test_an_unreported_usage_round_trips_through_the_cache_codec_and_sums():
    u = Usage(prompt_tokens=40, completion_tokens=3, requests=2, cached_unreported=2)
    rec = Verdict(text="Y", finish_reason="stop", model="m", usage=u, created=1.0)
    back = records.decode(records.encode(rec))
    assert isinstance(back, Verdict) and back.usage == u
    total = Usage(prompt_tokens=10, cached_tokens=5, requests=1)
    total.add(u)
    assert (total.requests, total.cached_unreported, total.cached_tokens) == (3, 2, 5)

"""The records written and read back: one definition each, and the bytes their
writers produced before they were merged."""

from __future__ import annotations

import msgspec

from tension.core import formats
from tension.core.formats import DEFAULT_GROUP, Generator, PositionLine
from tension.core.pipelines import fairplay, generate, score


def test_all_is_exported():
    for name in formats.__all__:
        assert hasattr(formats, name), name


def test_the_pipelines_share_one_generator():
    assert generate.Generator is Generator
    assert fairplay.Generator is Generator


def test_generator_bytes_as_generate_wrote_them():
    g = Generator(model="m", system="s", paragraph_prompt="p {story}", final_prompt="f {story}", temperature=1.0,
                  max_tokens=1000, L=3)
    assert msgspec.json.encode(g) == (b'{"model":"m","system":"s","paragraph_prompt":"p {story}",'
                                      b'"final_prompt":"f {story}","temperature":1.0,"max_tokens":1000,"L":3}')


def test_generator_reads_a_hand_written_one():
    g = msgspec.convert({"model": "m", "system": "s", "paragraph_prompt": "p", "final_prompt": "f", "L": 2,
                         "note": "ignored"}, Generator)
    assert (g.temperature, g.max_tokens, g.L) == (1.0, 1024, 2)


def test_position_line_is_what_score_writes_and_keeps_its_key_order():
    assert score.PositionResult is PositionLine  # one definition for the writer and the reader
    assert PositionLine.__struct_fields__ == ("id", "group", "k", "pct", "n_endings", "n_match", "n_empty",
                                              "n_malformed", "no_rate", "endings_key", "judged_key")
    res = score.PositionResult(id="s", group="g", k=3, pct=0.25, n_endings=100, n_match=40, n_empty=1,
                               n_malformed=2, no_rate=0.6)
    line = msgspec.json.encode(res)
    assert msgspec.json.encode(msgspec.json.decode(line, type=PositionLine)) == line


def test_position_line_reads_the_fields_metrics_needs():
    p = msgspec.json.decode(b'{"id":"s","k":1,"pct":0.5,"no_rate":0.2}', type=PositionLine)
    assert (p.group, p.n_endings) == (DEFAULT_GROUP, 0)

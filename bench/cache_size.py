"""Cache bytes on disk per position at paper settings, for docs/cost.md.

bench/scale.py measures the cache of real runs against the stub, whose endings are
short and fixed. This writes the records one paper-scale position leaves in the
cache (tension.cache.store.Store, as `score` writes them): one Endings record of n
endings of `--ending-chars` characters (the paper's 150-token cap; ~4.5 characters
a token), n Verdict records ("Y"/"N" with usage), one JudgedPosition record and one
TokenCount, under keys of the real size, in group commits of 512 like the run's
committer. It prints bytes of data.mdb per position, with and without logprobs, and
per database, side by side: records compressed (what the store writes since issue 28)
and uncompressed (as before: `records.encode(…, compress=False)`).

The endings are real prose when `--texts` (default ../shared/data/pd_short_stories.jsonl,
the project's shared public-domain stories) is there: each position's n endings are
consecutive spans of whole sentences of one story, each sentence used once, so they share a
story's names and words as a position's endings do but repeat nothing. Without the
file they are drawn from a 25-word vocabulary (the figures before issue 28), which
compresses better than prose. A verdict's `seconds` is a measured latency, not a
constant.

    python bench/cache_size.py                     # n 100, 1,000 positions
    python bench/cache_size.py --endings 10 --positions 3000
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import random
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tension.cache import records
from tension.cache.store import DBS, Store

_WORDS = ("the harbour keeper watched rain fall on the lanterns while somebody called her name from the road "
          "and a letter waited under the stone by the chapel door").split()


def key(*parts) -> bytes:
    return b"\x01" + hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


_SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "pd_short_stories.jsonl"
_SENTENCE = re.compile(r'(?<=[.!?])["”’)]*\s+(?=[A-Z“"(\[])')  # METRICS.md 1.1


class Prose:
    """Consecutive spans of whole sentences of real stories, each sentence used once."""

    def __init__(self, path: Path, rng: random.Random):
        self.stories = [json.loads(line)["text"] for line in path.open(encoding="utf-8")]
        self.rng = rng
        self.spans: Iterator[str] = iter(())
        self.chars = 450

    def endings(self, n: int, chars: int) -> list[str]:
        """n endings of one story (continued by the next when it runs out), each of
        whole sentences, ≈ `chars` long."""
        self.chars = chars
        out: list[str] = []
        while len(out) < n:
            span = next(self.spans, None)
            if span is None:
                self.spans = self._story()
                continue
            out.append(span)
        return out

    def _story(self) -> Iterator[str]:
        s = [x for x in _SENTENCE.split(self.rng.choice(self.stories)) if x.strip()]
        span: list[str] = []
        want = self.chars * self.rng.uniform(0.6, 1.4)
        for sentence in s:
            span.append(sentence)
            if sum(len(x) + 1 for x in span) >= want:
                yield " ".join(span)
                span, want = [], self.chars * self.rng.uniform(0.6, 1.4)


def synthetic_endings(rng: random.Random, n: int, chars: int) -> list[str]:
    texts = []
    for _ in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < chars * rng.uniform(0.6, 1.4):
            words.append(rng.choice(_WORDS))
        texts.append(" ".join(words).capitalize() + ".")
    return texts


def position_records(rng: random.Random, p: int, n: int, chars: int, logprobs: bool, prose: Prose | None = None):
    texts = prose.endings(n, chars) if prose is not None else synthetic_endings(rng, n, chars)
    u = records.Usage(prompt_tokens=rng.randint(800, 4000), completion_tokens=150 * n, requests=1)
    yield "endings", key("e", p), records.Endings(texts=texts, finish_reasons=["stop"] * n, model="Qwen/Qwen3-32B",
                                                  usage=u, created=time.time(), seconds=12.5)
    lps = []
    answers = []
    for i in range(n):
        a = rng.choice("YN")
        lp = {"Y": -0.1, "N": -2.4, "Yes": -5.0, "No": -6.1} if logprobs else None
        answers.append(a)
        lps.append(lp)
        yield "verdicts", key("v", p, i), records.Verdict(
            text=a, finish_reason="stop", model="Qwen/Qwen3-8B", first_logprobs=lp, created=time.time(),
            usage=records.Usage(prompt_tokens=rng.randint(2500, 4200), completion_tokens=1, cached_tokens=2400,
                                requests=1), seconds=rng.uniform(0.05, 2.0))
    yield "positions", key("p", p), records.JudgedPosition(
        texts=answers, first_logprobs=lps if logprobs else [], judged=n, created=time.time(),
        usage=records.Usage(prompt_tokens=300_000, completion_tokens=n, cached_tokens=240_000, requests=n))
    yield "tokens", key("t", p), records.TokenCount(count=rng.randint(200, 5000), model="Qwen/Qwen3-32B", created=time.time())


@contextlib.contextmanager
def _uncompressed(on: bool):
    """The store writes records as before issue 28 (checksummed msgpack) while inside, if `on`."""
    encode = records.encode
    if on:
        records.encode = functools.partial(encode, compress=False)  # type: ignore[assignment]
    try:
        yield
    finally:
        records.encode = encode


def measure(positions: int, n: int, chars: int, logprobs: bool, texts: Path | None,
            compress: bool) -> tuple[float, dict[str, float]]:
    """data.mdb bytes per position, and each database's pages' bytes per position."""
    rng = random.Random(0)
    prose = Prose(texts, random.Random(1)) if texts is not None else None
    with tempfile.TemporaryDirectory(prefix="cache-size-") as tmp, _uncompressed(not compress):
        with Store(Path(tmp) / "llm.lmdb") as store:
            batch = []
            for p in range(positions):
                batch.extend(position_records(rng, p, n, chars, logprobs, prose))
                if len(batch) >= 512:
                    store.put_many(batch)
                    batch = []
            store.put_many(batch)
            used = (store.env.info()["last_pgno"] + 1) * store.env.stat()["psize"]
            per_db = {db: st["bytes"] / positions for db, st in store.stats().items()}
            return max(used, store.file_bytes()) / positions, per_db


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--positions", type=int, default=1000)
    ap.add_argument("--endings", type=int, default=100)
    ap.add_argument("--ending-chars", type=int, default=450, help="mean characters of an ending")
    ap.add_argument("--texts", type=Path, default=_SHARED,
                    help="stories (JSON Lines with `text`) to cut the endings from; 'none': synthetic words")
    args = ap.parse_args()
    texts = args.texts if str(args.texts) != "none" and args.texts.is_file() else None
    print(f"{args.positions:,} positions, n = {args.endings}, endings of ~{args.ending_chars} chars from "
          f"{texts or 'a 25-word vocabulary'}")
    print(f"| {'judge':<15} | {'records':<12} | {'KB data.mdb':>11} | " + " | ".join(f"{db:>9}" for db in DBS)
          + f" | {'vs before':>9} |")
    print(f"|{'-' * 17}|{'-' * 14}|{'-' * 12}:|" + "|".join("-" * 10 + ":" for _ in DBS) + f"|{'-' * 10}:|")
    for logprobs in (False, True):
        before = 0.0
        for compress in (False, True):
            b, per_db = measure(args.positions, args.endings, args.ending_chars, logprobs, texts, compress)
            before = before or b
            print(f"| {'with logprobs' if logprobs else 'without logprobs':<15} | "
                  f"{'compressed' if compress else 'uncompressed':<12} | {b / 1024:>11,.1f} | "
                  + " | ".join(f"{per_db[db] / 1024:>9,.1f}" for db in DBS) + f" | {before / b:>8.2f}x |", flush=True)


if __name__ == "__main__":
    main()

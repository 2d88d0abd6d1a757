"""The positions of a story (docs/metrics.md 1.1): its sentences, the candidates
whose anchor is long enough, their token counts, the pct filter and the context
check. `score`, `estimate` and `bench` all choose positions here, so they agree
on what a run sends.

Token counts come from a local counter (``--tokenizer words|PATH``) or, by
default, from the generation replicas' ``/tokenize``, cached in the "tokens"
database; so does the context length, which bounds the prefixes worth sending.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import msgspec

from tension.core.config import ScoreConfig
from tension.core.errors import ConfigError
from tension.core.inputs.corpus import Story
from tension.core.inputs.languages import detect_language
from tension.core.inputs.segment import (
    Candidate,
    boundary_warning,
    candidates,
    prefix_text,
    split_sentences,
    story_text,
    word_count,
)
from tension.core.llm.router import Router
from tension.core.llm.ticket import Ticket
from tension.core.prompts import score as prompts
from tension.core.run.engine import Engine
from tension.core.run.lifecycle import warn

__all__ = ["Position", "PositionFinder", "Counter", "make_tokenizer", "local_counter", "CHAT_TEMPLATE_SLACK",
           "PREFIX_BYTES", "prefix_batches"]

# Tokens a chat template adds around the messages (role markers, BOS/EOS), on top
# of the system prompt and instruction, when checking that a prompt fits the context.
CHAT_TEMPLATE_SLACK = 32
# Characters of a story's prefixes held at once while they are counted (`prefix_batches`).
PREFIX_BYTES = 256 * 2**20

# Token counts of a batch of texts, counted here (None: the server's /tokenize).
Counter = Callable[[list[str]], list[int]]


class Position(msgspec.Struct, frozen=True, kw_only=True):
    story: int  # index in the corpus's kept stories
    k: int
    pct: float
    tokens: int = 0  # tokens of the story prefix s[0:k] (what pct is made of; `estimate` sums them)
    story_tokens: int = 0  # tokens of the whole story


def make_tokenizer(cfg: ScoreConfig) -> Callable[[str], int] | None:
    """A local token counter for --tokenizer words|PATH; None means the server's
    /tokenize. Built before a run starts, so a bad path is a usage error."""
    t = cfg.tokenizer
    if t == "server":
        return None
    if t == "words":
        return word_count  # whitespace words (in scripts without spaces, characters per word)
    if not os.path.isfile(t):
        raise ConfigError(f"--tokenizer: {t} is not a file (expected 'server', 'words' or a tokenizer.json)")
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ConfigError("--tokenizer PATH needs the `tokenizers` package: "
                          "pip install 'tension-run[tokenizer]'") from e
    try:
        tok = Tokenizer.from_file(t)
    except Exception as e:  # the library raises its own Exception types
        raise ConfigError(f"--tokenizer: cannot load {t}: {e}") from e
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def local_counter(cfg: ScoreConfig) -> Counter | None:
    """`make_tokenizer` over a batch of texts; None for the server's /tokenize."""
    tok = make_tokenizer(cfg)
    return None if tok is None else lambda texts: [tok(t) for t in texts]


def prefix_batches(sents: list[str], cands: list[Candidate], max_chars: int, min_batch: int) -> Iterator[list[str]]:
    """The candidates' prefix texts in order, in batches of at most about `max_chars` characters
    and never fewer than `min_batch` prefixes (those counted at once): all of a story's prefixes
    at once are quadratic in its length (a 300,000-word story's made 12 GB and a MemoryError
    that lost the run, with advice to rerun the same command)."""
    batch = max(1, min_batch, max_chars // max(1, sum(map(len, sents)) + len(sents)))
    for i in range(0, len(cands), batch):
        yield [prefix_text(sents, c.k) for c in cands[i:i + batch]]


class PositionFinder:
    """The positions of each story of a run, and what was left out and why.

    `count` counts tokens locally (None: the generation servers' /tokenize, through
    the run's engine, the counts cached). The generation model id, which names the
    token and context records, is the router's once resolved."""

    def __init__(self, cfg: ScoreConfig, llm: Engine, router: Router, count: Counter | None):
        self.cfg = cfg
        self.llm = llm
        self.router = router
        self.count = count
        self.sentences: dict[int, list[str]] = {}  # story index -> its sentences
        self.too_long: dict[str, int] = {}  # story id -> positions skipped: prompt over the context
        self.no_positions: dict[str, str] = {}  # story id -> why no position was kept
        self.languages: dict[str, int] = {}  # the language whose sentence rules split them -> stories (run.json)
        self.context_len: int | None = cfg.max_model_len
        self.prompt_overhead: int | None = None

    @property
    def model(self) -> str:
        return self.router.model or ""

    async def positions(self, si: int, story: Story) -> list[Position]:
        cfg = self.cfg
        lang = detect_language(story.text)  # once: the split and the warning read it alike
        self.languages[lang.name] = self.languages.get(lang.name, 0) + 1
        sents = split_sentences(story.text, lang)
        self.sentences[si] = sents
        if (why := boundary_warning(story.text, lang)) is not None:
            warn(f"story {story.id!r}: {why}")
        cands = candidates(sents, cfg.min_anchor_words)
        if not cands:
            self.no_positions[story.id] = (
                f"{len(sents)} sentence(s): no sentence boundary found" if len(sents) < 2 else
                f"no sentence of >= {cfg.min_anchor_words} words to anchor a position")
            return []
        total = (await self.token_counts([story_text(sents)], story.id))[0]
        counts = await self.prefix_counts(sents, cands, story.id)
        limit = await self.prompt_limit(story.id)
        out = []
        for c, n in zip(cands, counts):
            pct = n / total if total else 0.0
            if not cfg.pct_min <= pct <= cfg.pct_max:
                continue
            if limit is not None and n > limit:
                # Sending it would only earn a 400: skip it, and say so.
                self.too_long[story.id] = self.too_long.get(story.id, 0) + 1
                continue
            out.append(Position(story=si, k=c.k, pct=pct, tokens=n, story_tokens=total))
        if not out and story.id not in self.too_long:
            self.no_positions[story.id] = f"no position with pct in [{cfg.pct_min}, {cfg.pct_max}]"
        return out

    async def prefix_counts(self, sents: list[str], cands: list[Candidate], affinity: str) -> list[int]:
        """The token counts of the candidates' prefixes, a batch at a time (`prefix_batches`)."""
        counts: list[int] = []
        for texts in prefix_batches(sents, cands, PREFIX_BYTES, self.cfg.tokenize_concurrency):
            counts += await self.token_counts(texts, affinity)
        return counts

    async def prompt_limit(self, affinity: str) -> int | None:
        """Longest story prefix (in tokens) whose generation prompt, with room for
        the endings, fits the generation model's context; None when unknown."""
        if self.context_len is None:
            await self._learn_context_len(affinity)
        if self.context_len is None:
            return None
        if self.prompt_overhead is None:
            template = prompts.ENDING_SYSTEM + "\n" + prompts.ENDING_USER.format(prefix="")
            self.prompt_overhead = (await self.token_counts([template], affinity))[0] + CHAT_TEMPLATE_SLACK
        return self.context_len - self.prompt_overhead - self.cfg.max_tokens

    async def _learn_context_len(self, affinity: str) -> None:
        # Not in the cache (an older cache, or one filled with --max-model-len): ask
        # the server, whose /tokenize reports it, rather than guess; a local counter
        # asks no server.
        self.context_len = await self.llm.context_len("generation", self.model, ticket=Ticket(key=affinity),
                                                      ask=self.count is None)

    async def token_counts(self, texts: list[str], affinity: str) -> list[int]:
        """Token counts, counted here, or from the cache or `affinity`'s generation server."""
        if self.count is not None:
            return self.count(texts)
        return await self.llm.token_counts("generation", self.model, texts, ticket=Ticket(key=affinity))

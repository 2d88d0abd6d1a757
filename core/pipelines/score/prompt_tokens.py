"""run.json's `prompt_tokens`: the prompt tokens a run's servers computed, per
generated position and per judged ending, against the ideal (docs/cost.md: every
shared prefix prefilled once; `pipelines/ideal.py`, the formulas `estimate` uses,
with E the mean tokens of this run's endings).

Two readings of what was computed:
- `usage`: the answers' usage as the servers reported it (prompt_tokens −
  cached_tokens; vLLM fills cached_tokens with --enable-prompt-tokens-details). For
  an n > 1 request vLLM reports the prompt once, so the n copies' own recomputed
  blocks are not in it.
- `server`: the servers' own counters over the run (/metrics
  ``vllm:prefix_cache_queries`` − ``vllm:prefix_cache_hits``, every copy counted),
  per role, or `shared` when both roles use the same servers; null without them.
  They count every request the servers got in that time, this run's or not.
- `per_unit`: per generated position (generation) and per judged ending (judge), the
  computed tokens by usage and by the server, the ideal's, and computed / ideal
  (`server_over_ideal`, `usage_over_ideal`); `server_none` says why the server's figure
  is null (over_ideal.py). `all` is both roles together: the only server figure when
  one server serves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tension.cache.records import Usage
from tension.core.config import ScoreConfig
from tension.core.llm.router import Router
from tension.core.pipelines.ideal import Tally
from tension.core.pipelines.over_ideal import NO_COUNTERS, NOT_VLLM, NOTHING_SENT, SHARED, over_ideal, per
from tension.core.pipelines.score.positions import Position
from tension.core.run.lifecycle import warn

__all__ = ["PromptTokens", "ServerReadings"]


class ServerReadings:
    """The vLLM servers' /metrics read just before the first request the run sends
    (the client's gate, after the pre-flight check) and after the last. A run that
    finds everything in the cache sends nothing, not even these."""

    def __init__(self, routers: Sequence[Router]):
        self.routers: list[Router] = []
        for r in routers:  # a server both roles use is read once (by the first role's router)
            if not any(r.same_servers(o) for o in self.routers):
                self.routers.append(r)
        self.started = False
        self.asked = False  # start() was called: the run sent a request

    def is_read(self, r: Router) -> bool:
        """Whether `r`'s servers were read (they say they are vLLM), once the run has sent."""
        return any(r.same_servers(o) for o in self.routers)

    async def start(self) -> None:
        self.asked = True
        # only servers that say they are vLLM (/v1/models owned_by, listed by the pre-flight
        # check): another OpenAI-compatible server is not probed for endpoints it may lack
        self.routers = [r for r in self.routers if all(s.is_vllm() for s in r.servers())]
        await self.read("start")
        self.started = bool(self.routers)

    async def read(self, when: str) -> None:
        for r in self.routers:
            await r.scrape_metrics(when)


class PromptTokens:
    """What each scored position used, gathered as positions complete."""

    def __init__(self, cfg: ScoreConfig):
        self.cfg = cfg
        self.by_story: dict[int, list[Position]] = {}
        self.usage = {"generation": Usage(), "judge": Usage()}
        self.said_over = False  # the servers' cached tokens over their prompt tokens, said once (issue 58 M11)
        self.endings = 0  # endings generated
        self.judged = 0  # endings judged
        self.endings_of: dict[tuple[int, int], int] = {}  # (story, k) -> endings (adaptive: they differ)

    def position(self, pos: Position, gen: Usage, judge: Usage, endings: int, judged: int) -> None:
        self.by_story.setdefault(pos.story, []).append(pos)
        self.endings_of[(pos.story, pos.k)] = endings
        self.usage["generation"].add(gen)
        self.usage["judge"].add(judge)
        self.endings += endings
        self.judged += judged

    def body(self, const: dict[str, int] | None, sentences: dict[int, list[str]], words: list[int],
             gen: Router, judge: Router, readings: ServerReadings | None = None) -> dict[str, Any]:
        positions = sum(len(ps) for ps in self.by_story.values())
        E = self.usage["generation"].completion_tokens / self.endings if self.endings else 0.0
        ideal = None
        if const is not None:
            tally = Tally(self.cfg, const, E)
            for si in sorted(self.by_story):
                ps = sorted(self.by_story[si], key=lambda p: p.k)
                tally.story(sentences[si], words[si], ps,
                            [self.endings_of[(si, p.k)] for p in ps] if self.cfg.adaptive else None)
            ideal = {role: t.computed for role, t in tally.totals().items()}
        usage: dict[str, dict[str, Any]] = {
            role: {"prompt": u.prompt_tokens, "cached": u.cached_tokens,
                   "computed": max(0, u.prompt_tokens - u.cached_tokens)} for role, u in self.usage.items()}
        for role, u in self.usage.items():
            if not u.cached_reported:  # no answer said what it took from the prefix cache: a 0 is no count
                usage[role].update(cached=None, computed=None,
                                   note=f"the {role} servers did not report cached prompt tokens")
            elif u.cached_unreported:
                usage[role]["note"] = (f"{u.requests - u.cached_unreported:,} of {u.requests:,} {role} requests "
                                       "reported cached prompt tokens: computed counts the others' whole")
            if u.cached_tokens > u.prompt_tokens:  # a server that counts its cache wrong: no negative figure
                note = (f"the {role} servers reported {u.cached_tokens:,} cached prompt tokens of "
                        f"{u.prompt_tokens:,} prompt tokens: computed taken as 0 (their usage is wrong)")
                usage[role]["note"] = note
                if not self.said_over:
                    self.said_over = True
                    warn(note + "; run.json prompt_tokens.usage says it")
        server = _server(gen, judge)
        units = {"generation": positions, "judge": self.judged}

        def none_why(role: str) -> str | None:
            if server is not None and role in server:
                return None
            if server is not None:
                return SHARED
            if readings is not None and not readings.asked:
                return NOTHING_SENT
            r = gen if role == "generation" else judge
            if readings is not None and r.single and not readings.is_read(r):  # replicas: the engine reads them
                return NOT_VLLM
            return NO_COUNTERS

        out: dict[str, Any] = {"positions": positions, "judged_endings": self.judged,
                               "mean_ending_tokens": round(E, 3), "ideal": ideal, "usage": usage, "server": server}
        per_unit: dict[str, dict[str, Any]] = {}
        for role in ("generation", "judge"):
            s_computed = server[role]["computed"] if server is not None and role in server else None
            i = ideal[role] if ideal is not None else None
            per_unit[role] = {
                "unit": "position" if role == "generation" else "judged ending",
                "usage_computed": per(usage[role]["computed"], units[role]),
                "server_computed": per(s_computed, units[role]),
                "ideal": per(i, units[role]),
                "server_over_ideal": over_ideal(s_computed, i) if units[role] else None,
                "usage_over_ideal": over_ideal(usage[role]["computed"], i) if units[role] else None,
                "server_none": None if s_computed is not None else none_why(role)}
        # both roles: with one server for both, the only figure its counters give
        total_server = None if server is None else sum(v["computed"] or 0 for v in server.values())
        total_ideal = None if ideal is None else sum(ideal.values())
        per_unit["all"] = {"unit": "run", "server_computed": total_server,
                           "ideal": total_ideal, "server_over_ideal": over_ideal(total_server, total_ideal),
                           "usage_over_ideal": over_ideal(None if any(u["computed"] is None for u in usage.values())
                                                          else sum(u["computed"] for u in usage.values()), total_ideal),
                           "server_none": None if server is not None else none_why("generation")}
        out["per_unit"] = per_unit
        return out


def _server(gen: Router, judge: Router) -> dict[str, dict[str, float | None]] | None:
    """Per role (or "shared"), Δ queries and hits of the servers' prefix caches over the run."""
    def total(r: Router) -> dict[str, float | None] | None:
        deltas = r.prefix_cache_tokens()
        if not deltas or any(d is None for d in deltas.values()):
            return None
        hits = sum(d[0] for d in deltas.values() if d is not None)
        queries = sum(d[1] for d in deltas.values() if d is not None)
        return {"queries": queries, "hits": hits, "computed": queries - hits,
                "hit_rate": round(hits / queries, 4) if queries else None}

    if set(gen.workers) == set(judge.workers):
        t = total(gen)
        return None if t is None else {"shared": t}
    g, j = total(gen), total(judge)
    if g is None or j is None:
        return None
    return {"generation": g, "judge": j}

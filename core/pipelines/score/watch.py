"""The live watch of a score run's answers: is the judge answering Y or N, and
are the endings endings? (docs/reliability.md, "Degenerate answers")

A broken setup (a server that ignores ``enable_thinking: false``, a wrong chat
template, a base model, a simulator that answers with random text) otherwise gives
confident numbers: every malformed verdict counts as no match, so every no-rate
is 1. `AnswerWatch` sees each position's endings and verdicts as they arrive and
keeps counts only (O(1) per verdict, O(n) per position): it stops the run early
when the first verdicts make it plain that the judge is not answering Y or N
(`--keep-going` scores on), and lists at the end what was degenerate, with
counts and what it means for the numbers.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from urllib.parse import urlsplit

from tension.cache.records import Endings
from tension.core.config import ScoreConfig
from tension.core.errors import ServerError
from tension.core.prompts.answers import reasoning_trace
from tension.core.prompts.score import parse_verdict
from tension.core.reports.answer_warnings import AnswerWarning

__all__ = ["AnswerWatch", "DegenerateAnswers", "MIN_VERDICTS", "STOP_PREFIX", "EMPTY_PREFIX", "GREEDY_PREFIX",
           "OWN_WAY_OUT", "way_out", "redacted_sample", "server_text"]

STOP_PREFIX = "the judge is not answering Y or N"  # opens the early stop's error (the CLI knows it)
EMPTY_PREFIX = "every ending is empty"  # opens the error of a run whose endings are all empty
GREEDY_PREFIX = "the generation server decodes greedily"  # opens the stop on the first position's copies
OWN_WAY_OUT = (STOP_PREFIX, EMPTY_PREFIX, GREEDY_PREFIX)  # errors that say their own way out
# Endings this short may coincide at any temperature: the greedy check needs longer ones.
GREEDY_MIN_TOKENS = 8
# transformers serve's per-request switch of sampling (issue 61 H1: it decodes greedily unless the
# model's generation_config.json sets do_sample, whatever the temperature)
DO_SAMPLE_BODY = '{"generation_config": "{\\"do_sample\\": true}"}'
SAMPLES = 3  # raw answers quoted in the early-stop error and the warning
SAMPLE_CHARS = 60  # each cut to this many characters
SAMPLE_TRIES = 50  # malformed answers looked at for a sample that reads differently (then no more cost)
MIN_VERDICTS = 20  # the one-letter check needs this many verdicts of a story (or of the run)
STORY_IDS = 5  # story ids named in the one-letter warning
# Anything that looks like a credential is never quoted (an answer may echo a header).
_SECRET = re.compile(r"(?i)authorization\s*[:=]?\s*(?:bearer\s+)?\S+|bearer\s+\S+|\bsk-[\w-]{4,}"
                     r"|api[_-]?key\s*[:=]\s*\S+")


class DegenerateAnswers(ServerError):
    """The judge is not answering Y or N: the run stopped early (--keep-going scores
    on); or every ending is empty (nothing was judged: no result)."""


def way_out(role: str, out: object, cache: str | None = None) -> str:
    """How to get past a broken setup's answers of `role` that the cache now holds;
    the drop names the run's --cache when it had one (a command that works pasted)."""
    drop = f"tension-run cache drop --run {shlex.quote(str(out))} --role {role} --yes" + (
        f" --cache {shlex.quote(str(cache))}" if cache else "")
    return (f"once the setup is fixed, rerun with --refresh {role} (it asks again and writes the new answers "
            f"over the cached ones), or drop them first with `{drop}`")


def redacted_sample(text: str) -> str:
    """A raw answer as the messages quote it: credential-looking text removed, cut
    to SAMPLE_CHARS characters, as a Python literal (newlines and control
    characters escaped)."""
    clean = _SECRET.sub("[redacted]", text)
    return repr(clean[:SAMPLE_CHARS] + ("…" if len(clean) > SAMPLE_CHARS else ""))


def server_text(url: str) -> str:
    """A server URL without user, password, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "") + parts.path


class AnswerWatch:
    """Counts of one score run's endings and verdicts, the early stop, and the
    warnings at the end (module docstring)."""

    def __init__(self, cfg: ScoreConfig, out: object = "OUT"):
        self.cfg = cfg
        self.out = out  # the run's folder, named in the way out
        self.servers = ", ".join(server_text(r.url) for r in cfg.judge_replicas())
        self.verdicts = self.yes = self.no = self.malformed = self.empty = self.traces = 0
        self.samples: list[str] = []  # the first malformed answers that read differently, as quoted
        self.sample_tries = 0
        self.letters: dict[str, list[int]] = {}  # story id -> [Y, N, verdicts]
        self.endings = self.empty_endings = self.cut = self.ending_traces = 0
        self.positions = self.identical = 0  # positions with n >= 2; of them, all n endings the same
        self.greedy_checked = False  # the first position's endings were looked at (`first_endings`)
        # whether the judge server is known to hold a constrained answer (core/llm/servers.py
        # `Server.holds_constraint`: vLLM, llama.cpp), asked when the early stop is said
        self.judge_holds_constraint: Callable[[], bool] = lambda: True
        # the judge's constraint as its requests carry it: --judge-constraint, or none once a server
        # refused it (core/pipelines/unconstrained.py)
        self.judge_constraint: Callable[[], str] = lambda: cfg.judge_constraint

    def position(self, story: str, rec: Endings, answers: list[str | None], judge_model: str) -> None:
        """One judged position; raises DegenerateAnswers for the early stop."""
        self.see_endings(rec)
        per_story = self.letters.setdefault(story, [0, 0, 0])
        for a in answers:
            if a is None:  # an empty ending: not judged
                continue
            self.verdicts += 1
            per_story[2] += 1
            match, malformed = parse_verdict(a)
            if match:
                self.yes += 1
                per_story[0] += 1
            elif not malformed:
                self.no += 1
                per_story[1] += 1
            else:
                self.see_malformed(a)
        cfg = self.cfg
        if (not cfg.keep_going and self.verdicts >= cfg.stop_after
                and self.malformed >= cfg.stop_malformed_share * self.verdicts):
            raise DegenerateAnswers(self.stop_message(judge_model))

    def first_endings(self, rec: Endings) -> None:
        """The endings of the first position with two or more, as soon as they are in
        (before they are judged): the same non-empty text n times at a temperature
        above 0 is a server that ignores the request's sampling and decodes greedily
        (issue 61 H1: transformers serve, a day of compute for n copies of one
        ending); the run stops with the fix (`--keep-going` scores on)."""
        if self.greedy_checked or len(rec.texts) < 2:
            return
        self.greedy_checked = True
        cfg = self.cfg
        first = rec.texts[0]
        # A repeated reasoning trace is left to the judge's early stop, which names reasoning as the
        # cause: switching reasoning off is the fix the user needs first.
        if (cfg.keep_going or cfg.temperature <= 0 or cfg.max_tokens < GREEDY_MIN_TOKENS or not first.strip()
                or reasoning_trace(first) or any(t != first for t in rec.texts)):
            return
        servers = ", ".join(server_text(r.url) for r in cfg.generation_replicas())
        raise DegenerateAnswers(
            f"{GREEDY_PREFIX}: the first position's {len(rec.texts)} endings at temperature {cfg.temperature:g} are "
            f"one text, repeated ({redacted_sample(first)}): the server ignores the requests' temperature and "
            f"top_p, so every no-rate would judge one ending {len(rec.texts)} times, not {len(rec.texts)} "
            f"endings. Generation server {servers}. transformers serve decodes this way unless the model's "
            "generation_config.json sets \"do_sample\": true: set it and restart the server, or switch sampling "
            f"on per request with --extra-body '{DO_SAMPLE_BODY}' (docs/servers.md). These endings are now in the "
            f"cache: {way_out('generation', self.out, cfg.cache)} (a run with --extra-body asks anew by itself); "
            "or add --keep-going to score with them anyway.")

    def see_endings(self, rec: Endings) -> None:
        first = rec.texts[0] if rec.texts else ""
        same = True
        for text, reason in zip(rec.texts, rec.finish_reasons):
            self.empty_endings += not text.strip()
            self.cut += reason == "length"
            self.ending_traces += reasoning_trace(text)
            same = same and text == first
        self.endings += len(rec.texts)
        if len(rec.texts) >= 2:
            self.positions += 1
            self.identical += same and bool(first.strip())  # all empty is `endings_empty`, not the sampling

    def see_malformed(self, answer: str) -> None:
        self.malformed += 1
        if not answer.strip():
            self.empty += 1
        elif reasoning_trace(answer):
            self.traces += 1
        if len(self.samples) < SAMPLES and self.sample_tries < SAMPLE_TRIES:
            self.sample_tries += 1
            if (shown := redacted_sample(answer)) not in self.samples:
                self.samples.append(shown)

    def sample_text(self) -> str:
        return ", ".join(self.samples) or "(none kept)"

    def stop_message(self, judge_model: str) -> str:
        m, n = self.malformed, self.verdicts
        constraint = self.judge_constraint()
        # M2 of ../shared/reviews/external-servers-2026-12-02.md: the advice named the
        # constraint already in use; each way out here changes what is sent
        other = {"none": "try --judge-constraint choice", "choice": "try --judge-constraint logprobs"}
        if constraint != self.cfg.judge_constraint:  # fell back: the server refuses the one asked
            other["none"] = (f"try --judge-constraint logprobs: the judge server refuses --judge-constraint "
                             f"{self.cfg.judge_constraint}, so these answers were free")
        reasoning = ("reasoning not switched off: the server ignores chat_template_kwargs {\"enable_thinking\": "
                     "false} (serve the model with reasoning off" + (f", or {other[constraint]})" if constraint in other
                                                                      else ")"))
        causes = [reasoning,
                  "a chat template that is wrong for the model (the answers echo or continue the prompt)",
                  "not an instruction model (a base model continues the text instead of answering)"]
        if self.traces * 2 >= m:
            causes[0] += f"; {self.traces} of these answers open with <think>, so this is the likely one"
        else:
            causes.append("a server that does not run the model asked for (answers of random text)")
        if constraint == "choice" and not self.judge_holds_constraint():
            causes.insert(0, "the judge server is neither vLLM nor llama.cpp, so --judge-constraint choice went as "
                             "vLLM's structured_outputs, which such a server may ignore (said at the start): rerun "
                             "with --judge-constraint logprobs instead, which reads Y or N from the first token's "
                             "probabilities on any server that returns logprobs")
        return (f"{STOP_PREFIX}: {m} of the first {n} verdicts ({m / n:.0%}) are neither "
                f"({self.traces} open with a reasoning trace, {self.empty} are empty). Judge model "
                f"{judge_model!r} at {self.servers}. Sample answers: {self.sample_text()}. Likely causes: "
                + "; ".join(f"({i}) {c}" for i, c in enumerate(causes, 1))
                + ". A malformed verdict counts as no match, so every no-rate would be near 1 and mean nothing. "
                "These answers are now in the cache and a rerun reads them from it, so the same command stops "
                f"here again even against a fixed server: {way_out('judge', self.out, self.cfg.cache)}; or add "
                "--keep-going to score with these answers anyway.")

    def check_endings(self) -> None:
        """At the end of the work: a run whose every ending is empty has no result."""
        e = self.endings
        if e and self.empty_endings == e:
            servers = ", ".join(server_text(r.url) for r in self.cfg.generation_replicas())
            raise DegenerateAnswers(
                f"{EMPTY_PREFIX}: the generation server returned {e} of {e} endings empty (content null or \"\"), "
                f"so nothing was judged and every no-rate would be 1; no outputs were written. Generation server "
                f"{servers}. These answers are now in the cache and a rerun reads them from it: "
                f"{way_out('generation', self.out, self.cfg.cache)}.")

    # -- the end of the run ----------------------------------------------------

    def warnings(self) -> list[AnswerWarning]:
        """What was degenerate in this run's answers, each with what it means."""
        return [w for w in (self.malformed_warning(), self.one_letter_warning(), *self.ending_warnings()) if w]

    def malformed_warning(self) -> AnswerWarning | None:
        m, n = self.malformed, self.verdicts
        if not n or m <= self.cfg.warn_malformed_share * n:
            return None
        return AnswerWarning(
            check="judge_malformed", count=m, total=n,
            seen=f"{m} of {n} ({m / n:.0%}) judge answers were neither Y nor N ({self.traces} opened with a "
                 f"reasoning trace, {self.empty} were empty; e.g. {self.sample_text()})",
            meaning=f"each counts as no match, so the no-rates are raised by up to {m / n:.2f} on average; the "
                    "curves measure the judge's answer format more than the stories; a rerun reads these answers "
                    f"from the cache: {way_out('judge', self.out, self.cfg.cache)}")

    def one_letter_warning(self) -> AnswerWarning | None:
        share = self.cfg.warn_constant_share
        n = self.verdicts
        for letter, k in (("Y", self.yes), ("N", self.no)):
            if n >= MIN_VERDICTS and k >= share * n:
                level = "0" if letter == "Y" else "1"
                return AnswerWarning(
                    check="judge_one_letter", count=k, total=n,
                    seen=f"the judge answered {letter} to {k} of {n} ({k / n:.0%}) endings",
                    meaning=f"every no-rate is near {level} whatever the story: the numbers show the judge's "
                            "bias, not the stories' tension, and their differences carry no information")
        flat = [sid for sid, (y, no, v) in self.letters.items() if v >= MIN_VERDICTS and max(y, no) >= share * v]
        if not flat:
            return None
        ids = ", ".join(flat[:STORY_IDS]) + (", …" if len(flat) > STORY_IDS else "")
        return AnswerWarning(
            check="judge_one_letter_story", count=len(flat), total=len(self.letters),
            seen=f"the judge answered one letter to (nearly) every ending of {len(flat)} of {len(self.letters)} "
                 f"stories ({ids})",
            meaning="those stories' curves are flat at 0 or 1: their statistics say little about their tension")

    def ending_warnings(self) -> list[AnswerWarning | None]:
        cfg, e = self.cfg, self.endings
        return [
            _share_warning("endings_empty", self.empty_endings, e, cfg.warn_malformed_share,
                           "endings were empty",
                           "an empty ending is not judged and counts as no match: the no-rates are raised; "
                           f"{way_out('generation', self.out, self.cfg.cache)}"),
            _share_warning("endings_cut", self.cut, e, cfg.warn_cut_share,
                           f"endings were cut at --max-tokens ({cfg.max_tokens})",
                           "the judge compared unfinished predictions; raise --max-tokens, or the model does "
                           "not stop after 2–3 sentences as asked"),
            _share_warning("endings_reasoning", self.ending_traces, e, cfg.warn_malformed_share,
                           "endings open with a reasoning trace (<think>)",
                           "reasoning is not switched off: the judge compared the model's thinking with the "
                           "story, not a predicted ending"),
            _share_warning("endings_identical", self.identical, self.positions, cfg.warn_identical_share,
                           "positions had all their endings identical",
                           "the server did not honour the temperature or seed: a position's n samples are one "
                           "sample, so its no-rate is 0 or 1, not a share"),
        ]


def _share_warning(check: str, count: int, total: int, share: float, seen: str, meaning: str
                   ) -> AnswerWarning | None:
    if not total or count <= share * total:
        return None
    return AnswerWarning(check=check, count=count, total=total, seen=f"{count} of {total} ({count / total:.0%}) {seen}",
                         meaning=meaning)

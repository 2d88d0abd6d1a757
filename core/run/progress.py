"""The progress bar of long runs: units done (score's positions, generate's stories
or paragraphs, fairplay's reader values) of those known so far, items started
(stories, ideas) of all, requests/s and tokens/s actually sent, cache hits, ETA
(tqdm; silent when disabled).

A unit can take long: a position's 100 endings and 100 verdicts on a server that
answers one request at a time took over an hour for 33 positions, with the bar at
0 all along (M4 of ../shared/reviews/external-servers-2026-12-02.md). So the bar
also counts answers as they come (an ending, a chunk's endings, a verdict) and,
where the pipeline says how many answers a unit takes (`Pace.per_unit`, or each
unit's own count: fairplay's know-it-all takes K continuations to the end and their
verdicts, a reader one answer), the time left from the answers per second so far.

The time left is given from the first fresh answer on: on a server that gives one
choice a request the first answer took 86 s (transformers serve,
../shared/reviews/external-servers-2026-12-07.md L3), and waiting for 8 of them
left the bar without a time for over 11 minutes. Until `FIRST` is reached (8
answers and 2 s of work) the figure is rough (the bar says "(rough)"): the answers
so far over the time since the work began, which is what a server answering one
request at a time does, and too slow for one that answers several at once (their
first answers come together, and the figure is recomputed as they do). A run with
more than `QUIET` seconds left says so once on stderr at `FIRST`; where `FIRST`'s
seconds pass before its answers are in, already at the first answer after them,
marked rough, and again when the figure settles. One expected to take longer than
`Pace.long_run` also says what to lower (`Pace.advice`, as a command). The figures
said are kept for the run record (`Eta`, run.json `http.eta`: the settled one, or
the rough one when the run ended before it settled). Disabled (--no-progress),
nothing of it is said, and the pace is only kept."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
from tqdm.auto import tqdm  # a widget in a notebook, text in a terminal

from tension.cache.records import Usage

__all__ = ["Eta", "Pace", "Progress", "FIRST", "QUIET", "duration"]

FIRST = (8, 2.0)  # the estimate settles at this many fresh answers and seconds of work (rough before)
QUIET = 600.0  # a run with less time left than this is not told it (nor one under long_run, if shorter)


class Eta(msgspec.Struct, kw_only=True):
    """The run's pace, measured once its first answers were in (run.json `http.eta`)."""

    at_seconds: float  # into the run
    answers: int  # fresh answers then (endings and verdicts)
    answers_per_s: float
    answers_left: int
    seconds_left: float
    said: bool  # told on stderr (a long run), or only kept (a short one)
    rough: bool = False  # from the first answers, before FIRST (the run ended before it settled)


class Pace(msgspec.Struct, kw_only=True):
    """What a pipeline tells the bar about its work, for the time left."""

    per_unit: int  # answers one unit takes (score: a position's endings and verdicts), unless it says its own
    what: str = "answers (endings and verdicts)"  # its answers, in the line said on stderr
    long_run: float = 3600.0  # seconds; a run expected to take longer is told what to lower (0: never)
    # what to lower, given the answers per second and the units expected in all: a line, or "" for none
    advice: Callable[[float, float], str] | None = None


def _answers(n: int) -> str:
    return f"{n} answer" if n == 1 else f"{n} answers"


def duration(seconds: float) -> str:
    """'≈ 2 h 05 min', '≈ 14 min', '≈ 40 s'."""
    s = max(0, round(seconds))
    if s >= 3600:
        return f"≈ {s // 3600} h {(s % 3600) // 60:02d} min"
    if s >= 60:
        return f"≈ {round(s / 60)} min"
    return f"≈ {s} s"


class Progress:
    def __init__(self, *, enabled: bool, stories: int, unit: str = "pos",
                 say: Callable[[str], None] | None = None):
        self.enabled = enabled
        self._bar = tqdm(total=0, unit=unit, desc=f"0/{stories} stories", disable=not enabled,
                         dynamic_ncols=True, smoothing=0.05) if enabled else None
        self.stories = stories
        self.stories_started = 0
        self.hits = 0
        self.fresh_requests = 0
        self.fresh_tokens = 0
        self.answers = 0  # fresh answers: endings (a chunk's, one by one) and verdicts
        self._open = 0  # of those, the ones in units not done yet (about)
        self.units = 0  # units known so far (the bar's total)
        self.done = 0
        self.planned = 0  # answers the units known so far take (Pace.per_unit each, or their own)
        self.planned_done = 0  # of those, the done units'
        self.pace: Pace | None = None
        self._rough: Eta | None = None  # from the first answer on (module docstring)
        self._settled: Eta | None = None  # once FIRST is reached
        self._say = say
        self._t0 = time.monotonic()
        self._work: float | None = None  # when the first item started: the pace's clock (not the set-up's)
        self._last = 0.0
        self.extra: Callable[[], str] | None = None  # more postfix, e.g. per-replica requests

    def item_started(self, n: int, answers: int | None = None) -> None:
        """An item (a story, an idea) starts, with `n` units of work taking `answers`
        answers in all (None: `Pace.per_unit` each)."""
        self.stories_started += 1
        self.units += n
        self.planned += answers if answers is not None else n * self._per_unit()
        if self._work is None:
            self._work = time.monotonic()
        if self._bar is not None:
            self._bar.total += n
            self._bar.set_description(f"{self.stories_started}/{self.stories} stories", refresh=False)

    def hit(self, n: int = 1) -> None:
        self.hits += n

    def fresh(self, usage: Usage) -> None:
        self.fresh_requests += usage.requests
        self.fresh_tokens += usage.completion_tokens

    def answered(self, n: int = 1) -> None:
        """`n` fresh answers came (before their unit is done: the bar moves with them)."""
        self.answers += n
        self._open += n
        now = time.monotonic()
        if self._settled is None and self.pace is not None:
            self._estimate(now)  # kept for the record, said only with the bar
        if self._bar is not None and now - self._last > 0.5:
            self._postfix(now)
            self._bar.refresh()

    def unit_done(self, answers: int | None = None) -> None:
        """A unit is done, one that took `answers` answers as planned (None: `Pace.per_unit`)."""
        self.done += 1
        took = answers if answers is not None else self._per_unit()
        self.planned_done += took
        self._open = max(0, self._open - took)
        if self._bar is None:
            return
        now = time.monotonic()
        if now - self._last > 0.5:
            self._postfix(now)
        self._bar.update(1)

    # -- the time left -------------------------------------------------------------

    @property
    def eta(self) -> Eta | None:
        """The pace for the run record: the settled figure, else the rough one (None: no answer yet)."""
        return self._settled or self._rough

    def _per_unit(self) -> int:
        return self.pace.per_unit if self.pace is not None else 0

    def expected_units(self) -> float:
        """Units in all: those known, and as many per item for the items not started."""
        if self.stories_started == 0:
            return 0.0
        return self.units * max(1, self.stories) / self.stories_started

    def answers_left(self) -> int:
        """Answers still to come: those the units known take, as many per item for the
        items not started, less the done units' and those already in for the others."""
        if self.pace is None or self.stories_started == 0:
            return 0
        expected = self.planned * max(1, self.stories) / self.stories_started
        return max(0, round(expected - self.planned_done) - self._open)

    def _worked(self, now: float) -> float:
        """Seconds since the first item started (the set-up's time is not the work's)."""
        return max(1e-9, now - (self._work if self._work is not None else self._t0))

    def _rate(self, now: float) -> float:
        return self.answers / self._worked(now)

    def _postfix(self, now: float) -> None:
        assert self._bar is not None
        self._last = now
        dt = max(1e-9, now - self._t0)
        text = f"{self.fresh_requests / dt:.1f} req/s, {self.fresh_tokens / dt:.0f} tok/s, {self.hits} cache hits"
        if self.answers:
            text += f", {self.answers} answers"
            if self.eta is not None and (rate := self._rate(now)) > 0:
                text += f", {duration(self.answers_left() / rate)} left" + ("" if self._settled else " (rough)")
        if self.extra:
            text += f", {self.extra()}"
        self._bar.set_postfix_str(text, refresh=False)

    def _estimate(self, now: float) -> None:
        """The rough pace from the first fresh answer (recomputed until it is said),
        the settled one at FIRST: each kept, and said when the run is long (the
        settled one also when a rough one was said, to replace it)."""
        pace = self.pace
        assert pace is not None
        if self._work is None or self.answers < 1:
            return
        worked = self._worked(now)
        settled = self.answers >= FIRST[0] and worked >= FIRST[1]
        if not settled and self._rough is not None and self._rough.said:
            return  # said once; the bar's figure is recomputed as answers come
        rate = self._rate(now)
        left = self.answers_left()
        seconds = left / rate
        limit = min(QUIET, pace.long_run) if pace.long_run > 0 else QUIET
        # a rough figure is said only once FIRST's seconds have passed without its answers:
        # a server that answers faster is told its settled one a moment later, once
        long = (seconds > limit and (settled or worked >= FIRST[1])
                or (settled and self._rough is not None and self._rough.said))
        said = long and self.enabled and self._say is not None
        eta = Eta(at_seconds=round(now - self._t0, 1), answers=self.answers, answers_per_s=round(rate, 3),
                  answers_left=left, seconds_left=round(seconds, 1), said=said, rough=not settled)
        if settled:
            self._settled = eta
        else:
            self._rough = eta
        if not said or self._say is None:
            return
        per_s = f"{rate:.2f} {pace.what} per second so far, {left:,} still to come"
        if settled:
            line = f"this run needs {duration(seconds)} more: {per_s}"
        else:
            line = (f"this run needs {duration(seconds)} more, a rough figure from the first {_answers(self.answers)} "
                    f"in {duration(worked)[2:]} ({per_s}; a server that answers several requests at once "
                    f"is faster; said again once {FIRST[0]} answers are in)")
        if pace.long_run > 0 and seconds > pace.long_run and pace.advice is not None:
            advice = pace.advice(rate, self.expected_units())
            if advice:
                line += f"; {advice}"
        self._say(line)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

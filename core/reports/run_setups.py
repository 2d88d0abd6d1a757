"""What a compared run was scored with, and what `compare` says when two runs' setups
differ (core/reports/comparison.py): the endings, the seed, the models and every setting
of `score` that changes what a no-rate is (warnings); a run computed with curve settings
other than its own (notes); a run flagged for degenerate answers when scored."""

from __future__ import annotations

import json
import os
from typing import Any

import msgspec

from tension.core.reports.answer_warnings import warning_text
from tension.core.run.record import RunRecord
from tension.kernels.curves import CurveSettings

__all__ = ["MEASUREMENT_SETTINGS", "RunAbout", "run_about", "record_about", "setup_warnings", "unknown_setups",
           "other_texts",
           "curve_notes", "flagged"]


# The settings of `score` (run.json's config keys) that change what a no-rate is: the
# endings (their sampling and length), the verdicts (the judge's sampling, what it is
# shown, how it may answer) or the positions kept (the anchor rule, the pct window, the
# tokenizer that counts pct, the context that skips long prompts). Two runs that differ in
# one measure another thing, mean and late NR too; the endings, the seed and the models are
# said apart (setup_warnings). Curve settings are not here: compare recomputes both runs
# with A's.
MEASUREMENT_SETTINGS = ("temperature", "top_p", "max_tokens", "extra_body", "reasoning_off", "judge_temperature",
                        "judge_max_tokens", "judge_extra_body", "judge_constraint", "continuation_words",
                        "min_anchor_words", "pct_min", "pct_max", "tokenizer", "max_model_len")


class RunAbout(msgspec.Struct, kw_only=True):
    """What a compared run was scored with (its run.json): the facts that, differing
    between A and B, make a difference of their statistics partly a difference of setup."""

    generation_model: str | None = None
    judge_model: str | None = None
    endings: str | None = None  # "4", or "adaptive W 0.1, rounds of 20, at most 100"
    seed: int | None = None
    seed_scheme: str = "run"  # a run.json without it was made before per-position seeds (docs/changelog.md)
    settings: dict[str, Any] = {}  # the MEASUREMENT_SETTINGS run.json records (an older one may lack some)
    known: bool = True  # False: the folder has no run.json, and nothing above is known

    def text(self) -> str:
        if not self.known:
            return "setup unknown: no run.json"
        parts = [f"generation {self.generation_model or 'unknown'}, judge {self.judge_model or 'unknown'}",
                 (f"{self.endings} endings a position" if self.endings and self.endings[0].isdigit()
                  else f"endings {self.endings or 'unknown'}"),
                 f"seed {self.seed if self.seed is not None else 'none'}"]
        return "; ".join(parts)


def run_about(run: dict[str, Any]) -> RunAbout:
    cfg = run.get("config") or {}
    models = run.get("models") or {}
    w = cfg.get("target_half_width")
    endings = (f"adaptive W {w:g}, rounds of {cfg.get('round_endings')}, at most {cfg.get('max_endings')}"
               if isinstance(w, int | float) else None if cfg.get("endings") is None else str(cfg.get("endings")))
    seed = cfg.get("seed")
    scheme = cfg.get("seed_scheme")
    return RunAbout(generation_model=models.get("generation") or cfg.get("model"),
                    judge_model=models.get("judge") or cfg.get("judge_model"), endings=endings,
                    seed=seed if isinstance(seed, int) else None,
                    seed_scheme=scheme if isinstance(scheme, str) else "run",
                    settings={k: cfg[k] for k in MEASUREMENT_SETTINGS if k in cfg})


def record_about(record: RunRecord | None) -> RunAbout:
    """`run_about` of a run's typed record (None: its folder has none)."""
    if record is None:
        return RunAbout(known=False)
    return run_about({"config": record.header.config, "models": record.header.models})


def other_texts(ids: list[str], words_a: dict[str, Any], words_b: dict[str, Any]) -> list[str]:
    """The line for stories paired by id whose word counts (meta.jsonl) differ between the
    runs: not the same text, so their B − A compares two stories; none when all agree."""
    differ = [(i, words_a[i], words_b[i]) for i in ids if isinstance(words_a.get(i), int)
              and isinstance(words_b.get(i), int) and words_a[i] != words_b[i]]
    if not differ:
        return []
    shown = "; ".join(f"{i}: {a} and {b} words" for i, a, b in differ[:5]) + ("; …" if len(differ) > 5 else "")
    many = len(differ) > 1
    return [f"{len(differ)} pair{'s' if many else ''} by id hold{'' if many else 's'} stories of different lengths "
            f"in A and B ({shown}): their texts differ, so the B − A of {'such a pair' if many else 'that pair'} "
            "compares two stories, not two measurements of one"]


def unknown_setups(about: dict[str, tuple[str | os.PathLike, RunAbout]]) -> list[str]:
    """A line for each run (label: its path and setup) whose setup is unknown: it cannot be
    said to differ from the other's, nor to be the same."""
    return [f"run {label} ({path}) has no run.json: its endings, seed, models and settings are unknown, so "
            "compare cannot say whether they are A's and B's alike" for label, (path, a) in about.items()
            if not a.known]


def setup_warnings(a: RunAbout, b: RunAbout) -> list[str]:
    """A line for each fact of the setup that differs between runs A and B (review D11);
    none when either setup is unknown (`unknown_setups` says that)."""
    if not (a.known and b.known):
        return []
    out = []
    if a.endings != b.endings:
        out.append(f"A and B used different numbers of endings (A: {a.endings}, B: {b.endings}): IR, Retain and "
                   "convergence move with the endings a position (docs/metrics.md 1.6, 1.8), so their differences "
                   "are partly the endings'; compare runs of the same endings")
    if a.seed != b.seed:
        out.append(f"A and B used different seeds (A: {a.seed}, B: {b.seed}): their endings are other draws, so a "
                   "difference of a story includes the sampling of endings (its interval holds it)")
    elif a.seed is not None and a.seed_scheme != b.seed_scheme:
        out.append(f"A and B used different seed schemes (A: {a.seed_scheme}, B: {b.seed_scheme}; docs/metrics.md "
                   "1.2–1.3): their endings are other draws, so a difference of a story includes the sampling of "
                   "endings (its interval holds it)")
    for role, x, y in (("generation", a.generation_model, b.generation_model),
                       ("judge", a.judge_model, b.judge_model)):
        if x != y:
            out.append(f"A and B used different {role} models (A: {x}, B: {y}): a difference is partly the "
                       "models'")
    differ = [f"{k} (A: {_shown(a.settings[k])}, B: {_shown(b.settings[k])})" for k in MEASUREMENT_SETTINGS
              if k in a.settings and k in b.settings and a.settings[k] != b.settings[k]]
    if differ:
        out.append(f"A and B were scored with different settings ({'; '.join(differ)}): their endings, verdicts or "
                   "positions are not measured alike, so every difference, mean and late NR included, is partly the "
                   "settings'; compare runs scored with the same settings")
    return out


def _shown(value: Any) -> str:
    """A setting's value as run.json holds it (JSON: `null`, `true`, a string in quotes)."""
    return json.dumps(value, sort_keys=True)


def flagged(label: str, path: str | os.PathLike, record: RunRecord | None) -> list[str]:
    """The degenerate-answer warnings the run was scored with (run.json `warnings`: a judge
    that said one letter to everything, empty or identical endings, …; docs/reliability.md),
    a line each: a difference of such a run's numbers can be the models' failure, not the
    stories', and compare's ✓ cannot tell."""
    found = (record.body.get("warnings") if record is not None else None) or []
    out = []
    for w in found if isinstance(found, list) else []:
        try:
            out.append(f"run {label} ({path}) was flagged when scored: {warning_text(w)}")
        except (msgspec.ValidationError, TypeError):
            continue  # a hand-edited entry that is no warning: report.md shows the rest alike
    return out


_CURVE_FIELDS = ("window", "thresholds", "late_threshold", "retention_window")


def curve_notes(used: CurveSettings, recorded: dict[str, CurveSettings | None]) -> list[str]:
    """A line for each run (by its label) whose statistics compare computes with curve
    settings other than those it was scored with (its stories.csv's): not a difference of
    setup, since both runs get the same, but numbers that are not the run's own files'."""
    out = []
    for label, own in recorded.items():
        if own is None:
            continue
        differ = [f"{k} {_shown(getattr(used, k))} (scored with {_shown(getattr(own, k))})" for k in _CURVE_FIELDS
                  if getattr(used, k) != getattr(own, k)]
        if differ:
            out.append(f"{label}'s statistics here are computed with the curve settings used for both runs: "
                       f"{'; '.join(differ)}; they are not its stories.csv's")
    return out

"""``report.md`` of a score run, with its tables and figures: the paper's tables
(000, Table 6; 001, Table 18; core/reports/tables.py), the comparable statistics,
the stories with their intervals, the group bars and curves (core/reports/figures.py),
and what the run record says of the run (its outcome, models, settings, requests,
tokens, cost and versions).

The run folder is read back by core/reports/run_folder.py (`load_run`): everything is
recomputed from ``positions.jsonl`` (plus ``meta.jsonl`` and ``run.json``), so a
report can be rebuilt, or built with other curve settings, without any LLM; the run
that just wrote its record hands it over (`report(..., record=)`) rather than have it
read again.
"""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path
from typing import Any

import msgspec

from tension.cache.records import Usage
from tension.core.errors import ConfigError
from tension.core.inputs.jsonl import folder_aside, write_together
from tension.core.reports.answer_warnings import markdown_section
from tension.core.reports.comparable import SUFFIX, comparable_columns, finding_min_endings, min_endings
from tension.core.reports.filenames import unique_filenames
from tension.core.reports.markdown import md_alt, md_code, md_text
from tension.core.reports.metrics import stat_columns
from tension.core.reports.run_folder import RunData, load_run
from tension.core.reports.story_intervals import stat_matrix
from tension.core.reports.tables import comparable_table, fmt_stat, render_table, table6, table18, table_columns
from tension.core.run.record import RunRecord
from tension.kernels.bootstrap import N_RESAMPLES
from tension.kernels.curves import CurveSettings
from tension.kernels.turns import TURN_HEIGHT

__all__ = ["report", "Bars", "group_bars", "REPORT_OUTPUTS"]

# what `report` writes into a run folder: drawn from its outputs, stale beside another run's
REPORT_OUTPUTS = ("report.md", "table6.csv", "table18.csv", "figures")


def comparable_lines(data: RunData) -> list[str]:
    """report.md's section of the second-order statistics that can be compared, and what
    a reader may conclude from them at this run's endings."""
    fewest = min_endings(data.curves)
    lines = ["## Second-order statistics that can be compared (docs/metrics.md 1.9)", "",
             "Retain and the IRs above are the paper's, for reproducing its tables: binomial noise of the endings "
             "and the curve's level move them more than the story does, so they cannot rank corpora. Below, the "
             f"same statistics of the turns a rerun would see again (a rise and fall of at least {TURN_HEIGHT:g} "
             "no-rate, beyond the endings' own noise), with bootstrap 95% intervals over stories widened by what "
             "one more layer of that noise moves them.", "",
             comparable_table(data.groups, data.settings)]
    if fewest is None:
        lines += ["**Warning:** the run's positions do not hold their verdict counts, so there is no comparable "
                  "estimate.", ""]
        return lines
    shown = [name for name in comparable_columns(stat_columns(data.settings)) if name.startswith(("retain", "ir"))]
    need = {name.removesuffix(SUFFIX): finding_min_endings(name) for name in shown}
    ok = [name for name, n in need.items() if n is not None and n <= fewest]
    short = [f"{name} (from {n})" for name, n in need.items() if n is not None and n > fewest]
    never = [name for name, n in need.items() if n is None]
    said = [f"Positions hold at least {fewest} endings."]
    if ok:
        said.append(f"Differences between groups of {', '.join(ok)} may be read as findings when their intervals "
                    "do not overlap (docs/metrics.md 1.9 gives the false-positive rate and the coverage the study "
                    "measured).")
    if short:
        said.append(f"**Not** yet those of {', '.join(short)} endings a position: below it the study found them "
                    "biased or too often significant between groups of equal truth; read them as descriptions.")
    if never:
        said.append(f"{', '.join(never)}: a description only; the study found no number of endings at which its "
                    "comparisons hold.")
    lines += [" ".join(said), ""]
    return lines


# --- report.md -------------------------------------------------------------------


def report(run_dir: str | os.PathLike, *, max_curves: int = 50, gpu_hour_usd: float | None = None,
           settings: CurveSettings | None = None, n_resamples: int = N_RESAMPLES, seed: int = 0,
           usd_per_mtok: tuple[float | None, float | None] = (None, None), record: RunRecord | None = None) -> Path:
    """Write tables, figures and ``report.md`` into the run folder; returns its path.
    The report owns ``figures/``: it is drawn anew whole, so no image of an earlier
    report (another story set, other ids) stays behind. `record`: the run record as
    the run that wrote it holds it (``Run.written``), else its run.json is read."""
    if max_curves < 0 or n_resamples < 0:
        raise ConfigError(f"--max-curves and --resamples: expected >= 0, got {max_curves} and {n_resamples}")
    data = load_run(run_dir, settings, n_resamples=n_resamples, seed=seed, record=record)
    d = Path(run_dir)
    s = data.settings
    # Its outputs together (issue 58, item 5): the figures are drawn first into a hidden folder, then it,
    # the tables and report.md are put in place at once (`write_together`): a report stopped while it draws
    # or writes leaves the run's earlier report, tables and figures as they were (or none of them)
    with folder_aside(d / "figures") as drawn:
        curve_files = _draw_figures(drawn, data, max_curves)
        md = _report_md(d, data, curve_files, max_curves, gpu_hour_usd, n_resamples, seed, usd_per_mtok)
        write_together({d / "table6.csv": table6(data.groups, s, "csv"),
                        d / "table18.csv": table18(data.groups, s, "csv"), d / "report.md": md},
                       drawn={d / "figures": drawn})
    return d / "report.md"


def _report_md(d: Path, data: RunData, curve_files: list[tuple[str, str]], max_curves: int,
               gpu_hour_usd: float | None, n_resamples: int, seed: int,
               usd_per_mtok: tuple[float | None, float | None]) -> str:
    """report.md's text (`report`), its curves' files drawn."""
    s = data.settings

    lines = [f"# tension-run report: {md_code(d.name)}", ""]
    if data.record is not None:
        lines += _outcome_lines(data, data.record)
        lines += markdown_section(data.record.body)  # degenerate answers, first: they qualify every number below
    lines += ["## Results (000, Table 6 layout)", "", table6(data.groups, s), *endings_warning(data),
              "## With 95% bootstrap intervals (001, Table 18 layout)", "",
              f"{n_resamples:,} resamples over stories, seed {seed}.", "", table18(data.groups, s),
              *comparable_lines(data),
              *_story_lines(data, max_curves),
              "## Figures", "", "Bars: group means with 95% bootstrap intervals; a group of one story has no "
              "interval (marked n = 1).", "", "![Mean and late no-rate](figures/nr.png)", "",
              "![Inflection rate](figures/ir.png)", "", "![Retention](figures/retain.png)", ""]
    if curve_files:
        lines += ["### No-rate curves", "", "Raw (grey) and smoothed (blue) no-rate; triangles mark reversals "
                  "whose vertex angle is ≤ 60° (000, Fig. 3)."
                  + (f" First {max_curves} of {len(data.curves)} stories." if len(data.curves) > max_curves else ""),
                  ""]
        lines += [f"![{md_alt(sid)}]({path})" for sid, path in curve_files] + [""]
    lines += _audit_lines(d)
    if data.record is not None:
        lines += _run_lines(data, data.record, gpu_hour_usd, usd_per_mtok)
    lines += ["Files: `positions.jsonl`, `stories.csv`, `groups.csv`, `table6.csv`, `table18.csv`, `run.json`. "
              f"Rebuild with {md_code('tension-run report ' + shlex.quote(str(d)))}.", ""]
    return "\n".join(lines)


def _audit_lines(d: Path) -> list[str]:
    """The audit of the run's judge by people (issue 60; docs/metrics.md 1.10), when a
    sample was drawn (`tension-run audit sample`): agreement, κ, and the group
    statistics corrected for the judge's errors beside the uncorrected ones."""
    from tension.core.inputs.labels import sample_path

    if not sample_path(d).is_file():
        return []
    from tension.core.reports.audit_report import audit_section

    return [audit_section(d), ""]


def _story_lines(data: RunData, max_stories: int) -> list[str]:
    """The per-story table: each statistic with its 95% interval over resamples of the
    story's own verdicts (docs/metrics.md 1.6)."""
    s = data.settings
    if data.intervals is None:
        return ["## Stories", "", "No per-story intervals (`--interval-resamples 0`).", "",
                story_table(data, max_stories), ""]
    shown = min(len(data.curves), max_stories)
    more = f" First {shown} of {len(data.curves)} stories; all are in `stories.csv`." if shown < len(data.curves) \
        else ""
    return ["## Stories, with 95% intervals over their own verdicts", "",
            f"Each story's verdicts resampled within each position ({s.interval_resamples:,} resamples, seed "
            f"{s.interval_seed}); the interval covers the sampling of endings and verdicts at these models and "
            f"prompts, not the choice of story, model or prompt (docs/metrics.md 1.6).{more}", "",
            story_table(data, max_stories), ""]


def story_table(data: RunData, max_stories: int) -> str:
    """One row per story (the first `max_stories`): `value [lo, hi]` per statistic."""
    cols = table_columns(data.settings)
    names = stat_columns(data.settings)
    matrix = stat_matrix(data.stats)
    rows = []
    for i, c in enumerate(data.curves[:max_stories]):
        row = [c.id, c.group or "", str(len(c.x))]
        for stat, _ in cols:
            j = names.index(stat)
            cell = fmt_stat(stat, float(matrix[i, j]))
            if data.intervals is not None and not math.isnan(data.intervals.lo[i, j]):
                cell += (f" [{fmt_stat(stat, float(data.intervals.lo[i, j])).rstrip('%')}, "
                         f"{fmt_stat(stat, float(data.intervals.hi[i, j])).rstrip('%')}]")
            row.append(cell)
        rows.append(row)
    return render_table(["Story", "Group", "positions"] + [label for _, label in cols], rows, "md")


class Bars(msgspec.Struct, frozen=True, kw_only=True):
    """A group-bar figure of the report: which statistics, labelled how."""

    stats: list[str]
    labels: list[str]
    title: str
    ylabel: str
    top: float | None = None


def group_bars(s: CurveSettings) -> dict[str, Bars]:
    """The report's group-bar figures by name (figures/NAME.png): no-rate, inflection rate, retention."""
    ir_cols = stat_columns(s)[4:]
    return {"nr": Bars(stats=["mean_nr", "late_nr"], labels=["Mean NR", f"Late NR (≥{s.late_threshold:.0%})"],
                       title="Mean and late no-rate by group (95% bootstrap intervals)", ylabel="no-rate", top=1.0),
            "ir": Bars(stats=ir_cols, labels=[c.upper() for c in ir_cols],
                       title="Inflection rate by vertex-angle threshold", ylabel="inflection rate", top=1.0),
            "retain": Bars(stats=["retain"], labels=["Retain"], title="Post-spike tension retention",
                           ylabel="% of peak retained")}


def _draw_figures(figs: Path, data: RunData, max_curves: int) -> list[tuple[str, str]]:
    """The group bars and the first `max_curves` curves into the new, empty folder `figs`;
    returns (story id, path in the report) of each curve."""
    from tension.core.reports.figure_cache import bars_figure, report_curves

    s = data.settings
    (figs / "curves").mkdir(parents=True, exist_ok=True)
    for name, bars in group_bars(s).items():
        bars_figure(figs / f"{name}.png", data.groups, bars.stats, bars.labels, bars.title, bars.ylabel, top=bars.top)
    shown = data.curves[:max_curves]
    names = unique_filenames([c.id for c in shown])
    if shown:  # the curves' frame is a figure drawn once, worth it only for a curve (--max-curves 0)
        with report_curves(s) as plot:
            for c, name in zip(shown, names):
                plot.draw(figs / "curves" / f"{name}.png", c.id, c.x, c.y)
    return [(c.id, f"figures/curves/{name}.png") for c, name in zip(shown, names)]


def group_endings(data: RunData) -> dict[str, float]:
    """Each group's mean endings a position (positions.jsonl's `n_endings`; groups whose
    lines do not hold the counts are left out)."""
    sums: dict[str, list[int]] = {}
    for c in data.curves:
        if c.n_endings and min(c.n_endings) > 0:  # 0: a line written before the counts were kept
            acc = sums.setdefault(c.group or "all", [0, 0])
            acc[0] += sum(c.n_endings)
            acc[1] += len(c.n_endings)
    return {g: t / m for g, (t, m) in sums.items() if m}


def endings_warning(data: RunData) -> list[str]:
    """A warning under the table when its groups, compared on IR, Retain and convergence,
    hold different numbers of endings a position (an adaptive run: docs/metrics.md 1.7):
    those statistics move with the endings (1.8), so a difference between the groups is
    partly the endings'. Half an ending a position apart is the same."""
    by = group_endings(data)
    if len(by) < 2 or max(by.values()) - min(by.values()) <= 0.5:
        return []
    shown = ", ".join(f"{md_text(g)} {v:.1f}" for g, v in by.items())
    return [f"**Warning:** the groups hold different numbers of endings a position ({shown}): IR, Retain and "
            "convergence move with the endings (docs/metrics.md 1.8), so their differences between these groups "
            "are partly the endings'; mean and late NR do not. The comparable statistics below allow for each "
            "story's own noise (docs/metrics.md 1.9); `tension-run subsample` gives each statistic from the first k "
            "endings of every position.", ""]


def _outcome_lines(data: RunData, record: RunRecord) -> list[str]:
    """What happened, as run.json and the exit status tell it: the status, the
    stories scored, and every bad record, failed story and skipped story with its reason."""
    h, body = record.header, record.body
    st = body.get("stories", {})
    errors, failed, skipped = st.get("input_errors", []), st.get("failed", []), st.get("skipped", [])
    kept = st.get("kept", len(data.curves))
    code = h.exit_status  # an earlier version's record without it: as run_folder.record_of_doc reads it
    what = {0: "everything asked for was produced", 130: "interrupted"}.get(code, "something asked for is missing")
    inv = body.get("invocations", {})
    lines = [f"Status **{h.status}**, exit status {code} ({what}). Corpus {md_code(_corpus_shown(body))}: "
             f"{kept - len(failed)} stories scored, {len(failed)} failed, {len(skipped)} skipped by the word filter, "
             f"{len(errors)} bad input record(s); {sum(len(c.x) for c in data.curves)} positions in "
             f"`positions.jsonl`; wall time {h.wall_seconds:.1f} s"
             + (f" ({inv['wall_seconds']:.1f} s over {inv['count']} invocations into this folder)"
                if inv.get("count", 1) > 1 else "") + ".", ""]
    if h.error:
        lines += [f"The run stopped: {md_text(h.error)}", ""]
    if (a := body.get("adaptive")) and a.get("endings_fixed"):
        rounds = ", ".join(f"{r}: {n}" for r, n in a.get("rounds", {}).items())
        lines += [f"Adaptive endings (docs/metrics.md 1.7): {a['endings_used']:,} endings over {a['positions']:,} "
                  f"positions, {a['share_of_fixed']:.0%} of the {a['endings_fixed']:,} of --max-endings "
                  f"{a['max_endings']} each (target half-width {a['target_half_width']:g}, rounds of "
                  f"{a['round_endings']}; positions by rounds used: {rounds}).", ""]
    items = ([f"- bad input: {md_text(e)}" for e in errors]
             + [f"- story {md_code(f['id'])} failed at {f['stage']}: {md_text(f['error'])}" for f in failed]
             + [f"- story {md_code(k['id'])} skipped: {md_text(k['reason'])}" for k in skipped])
    if items:
        lines += ["## Input errors, failures and skipped stories", "", *items, ""]
    return lines


def _tokens(usage: Usage, cached: bool) -> str:
    """Tokens used; "unknown" when answers were counted but not one token: the
    server sends no `usage`, and 0 would be a false count. Likewise the prefix
    cache's share, where no answer reported cached tokens (issue 61)."""
    if usage.requests > 0 and not (usage.prompt_tokens or usage.completion_tokens):
        return "unknown: the server reported no token usage"
    prefix = ""
    if cached and not usage.cached_reported:
        prefix = " (the server did not report how many were served from its prefix cache)"
    elif cached:
        some = (f", as {usage.requests - usage.cached_unreported:,} of {usage.requests:,} requests reported it"
                if usage.cached_unreported else "")  # the others' servers did not say: more may have been
        prefix = f" ({usage.cached_tokens:,} served from the server's prefix cache{some})"
    return f"{usage.prompt_tokens:,} prompt{prefix}, {usage.completion_tokens:,} completion"


def _tokens_cost(usage: Usage, per_m_in: float | None, per_m_out: float | None) -> str:
    """The run's bill where tokens are priced (a hosted API): this run's prompt tokens
    as the server counted them (a provider's discount for its prefix cache is not
    taken off) and its completion tokens."""
    inp, out = usage.prompt_tokens, usage.completion_tokens
    if usage.requests > 0 and not (inp or out):
        return "- cost by tokens: unknown (the server reported no token usage)"
    usd = (inp * (per_m_in or 0.0) + out * (per_m_out or 0.0)) / 1e6

    def part(n: int, p: float | None, what: str) -> str:
        return f"{n:,} {what} × ${p:g}/M" if p is not None else f"{n:,} {what} (not priced)"

    return (f"- cost by tokens: {part(inp, per_m_in, 'prompt')} + {part(out, per_m_out, 'completion')} = "
            f"${usd:,.2f} (this run's tokens, as the server counted them)")


def _corpus_shown(body: dict[str, Any]) -> str:
    """The corpus as the user typed it (run.json `corpus_given`), else as recorded."""
    return str(body.get("corpus_given") or body.get("corpus"))


def _run_lines(data: RunData, record: RunRecord, gpu_hour_usd: float | None,
               usd_per_mtok: tuple[float | None, float | None] = (None, None)) -> list[str]:
    """The run's models, settings, requests, tokens, cost and versions."""
    h, s = record.header, data.settings
    cfg, models = h.config, h.models
    seed = cfg.get("seed")
    lines = ["## Run", "", f"- generation model `{models.get('generation')}` at `{cfg.get('base_url')}`; "
             f"judge model `{models.get('judge')}` at `{cfg.get('judge_base_url') or cfg.get('base_url')}`",
             f"- endings per position {cfg.get('endings')}, temperature {cfg.get('temperature')}, top-p "
             f"{cfg.get('top_p')}, max tokens {cfg.get('max_tokens')}, "
             + ("unseeded (no --seed)" if seed is None else f"seed {seed}")
             + f"; judge temperature {cfg.get('judge_temperature')}, max tokens {cfg.get('judge_max_tokens')}",
             f"- curve settings: window {s.window}, thresholds {', '.join(f'{a:g}°' for a in s.thresholds)}, "
             f"late ≥ {s.late_threshold}, retention window {s.retention_window}"]
    req, u_now, u_all = h.requests, h.usage_this_run, h.usage_all_answers
    lines += [f"- requests sent: {req.get('generation', 0)} generation, {req.get('judge', 0)} judge, "
              f"{req.get('tokenize', 0)} tokenize ({h.http.retries} retries); cache hits: "
              + ", ".join(f"{v} {k}" for k, v in h.cache.hits.items()),
              "- tokens this run: " + _tokens(u_now, cached=True),
              "- tokens of all answers (as if nothing were cached): " + _tokens(u_all, cached=False)]
    if gpu_hour_usd is not None:
        inv = record.body.get("invocations", {"count": 1, "wall_seconds": h.wall_seconds})
        hours = inv["wall_seconds"] / 3600
        lines.append(f"- cost: {hours:.3f} h of wall time × ${gpu_hour_usd:g}/GPU-hour = ${hours * gpu_hour_usd:.2f} "
                     f"per GPU serving this run (its {inv['count']} invocation(s) into this folder: the first "
                     "and every resume or rerun)")
    if usd_per_mtok != (None, None):
        lines.append(_tokens_cost(u_now, *usd_per_mtok))
    return lines + ["- versions: " + ", ".join(f"{k} {val}" for k, val in h.versions.items()), ""]

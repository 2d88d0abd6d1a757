"""What the API verbs return: typed results holding the pipeline's own summary
(what the CLI prints from), the tables of statistics it computed (per story, per
group: the rows its CSV files hold, from memory; core/api/tables.py `Table`) and
the run record, each with ``to_pandas()`` where pandas is installed (the optional
extra ``pandas``: ``pip install 'tension-run[pandas]'``). In a notebook a result
shows as a table (``_repr_html_``), ``plot()`` draws the report's figures and
``view()`` serves the run's view."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import msgspec

from tension.core.api.tables import Table, html_table, pandas

if TYPE_CHECKING:  # the pipelines' records, imported only to type (import tension stays light)
    from matplotlib.figure import Figure
    from pandas import DataFrame

    from tension.core.pipelines.estimate import Estimate
    from tension.core.pipelines.fairplay import FairPlayRun
    from tension.core.pipelines.generate import GenerateSummary
    from tension.core.pipelines.score import RunSummary
    from tension.core.reports.comparison import Comparison
    from tension.core.reports.fairplay_metrics import FairPlaySummary
    from tension.core.reports.metrics import MetricsResult as ComputedMetrics
    from tension.core.run.record import RunHeader, RunRecord
    from tension.core.view.background import BackgroundView

__all__ = ["View", "ScoreResult", "EstimateResult", "MetricsResult", "CompareResult", "FairPlayResult",
           "FairPlayMetricsResult", "GenerateResult"]


def record_of(record: RunRecord | None) -> tuple[dict[str, Any] | None, RunHeader | None]:
    """A run record as a result holds it, from the run's memory (not re-read from
    the file it wrote): the whole record as plain data, and its typed header."""
    return (None, None) if record is None else (record.doc(), record.header)


class _Result(msgspec.Struct, kw_only=True):
    """What every run's result has: the pipeline's summary, its status and exit
    status (as the CLI would exit), where it wrote."""

    status: str
    exit_status: int
    out: str

    def _shown(self) -> Table | None:
        """The table a notebook shows of the result."""
        return None

    def _repr_html_(self) -> str:
        """The status, where it wrote, why it failed; then the result's table."""
        summary = getattr(self, "summary", None)
        error = getattr(summary, "error", None)
        errors = getattr(self, "errors", [])
        listed = "".join(f"<br>{html.escape(e)}" for e in errors[:10])
        if len(errors) > 10:
            listed += f"<br>… and {len(errors) - 10} more (`errors`)"
        head = (f"<p><b>{html.escape(type(self).__name__)}</b>: {html.escape(self.status)} "
                f"(exit status {self.exit_status})" + (f", {html.escape(self.out)}" if self.out else "")
                + (f"<br>{html.escape(str(error))}" if error else "")
                + (f"<br>{len(errors)} records or stories failed:{listed}" if errors else "") + "</p>")
        table = self._shown()
        return head + (html_table(table) if table is not None else "")


class View(msgspec.Struct, kw_only=True):
    """A run's view served from this process (``result.view()``): its address
    (``url``); ``stop()`` ends it. In a notebook it shows as an inline frame when
    the notebook's origin is known (``frame_origins``: the origins allowed to frame
    it, under the per-view token in ``url``), else as a link and why (``unframed``)."""

    url: str
    server: BackgroundView
    frame_origins: tuple[str, ...] = ()
    unframed: str = ""

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        self.server.stop()

    def _repr_html_(self) -> str:
        u = html.escape(self.url, quote=True)
        link = f'view: <a href="{u}" target="_blank">{u}</a> (stop() ends it)'
        if not self.frame_origins:
            return f"<p>{link}</p><p>Not shown here: {html.escape(self.unframed)}.</p>"
        return (f"<p>{link}</p>"
                f'<iframe src="{u}" width="100%" height="600" style="border:1px solid #ccc"></iframe>')


def serve_view(out: str, host: str, port: int, origin: str | None = None) -> View:
    """`tension-run view OUT` from a background thread of this process, framed by
    `origin` (default: the Jupyter server that started this kernel, if any)."""
    from tension.core.api.notebook import notebook_origins
    from tension.core.pipelines.recalls import fairplay_recall, score_recall
    from tension.core.view.app import frame_origin
    from tension.core.view.background import start_view

    origins, why = ((frame_origin(origin),), "") if origin is not None else notebook_origins()
    server = start_view([out], host=host, port=port, score_recall=score_recall, fairplay_recall=fairplay_recall,
                        frame_origins=origins)
    return View(url=server.embed_url or server.url, server=server, frame_origins=server.frame_origins,
                unframed=why)


def plot_computed(computed: ComputedMetrics | None, story: str | None, bars: str | None) -> Figure:
    """The report's figure of a story's curve (the first story's by default), or
    with `bars` ("nr", "ir", "retain") its group bars, as a matplotlib Figure."""
    from tension.core.errors import ConfigError

    if computed is None:
        raise ValueError("the run computed no statistics (see its status and error)")
    from tension.core.reports.figures import bars_plot, curve_plot, shown
    from tension.core.reports.report import group_bars

    if bars is not None:
        kinds = group_bars(computed.settings)
        if bars not in kinds:
            raise ConfigError(f"plot(): `bars`: expected one of {', '.join(kinds)}, got {bars!r}")
        b = kinds[bars]
        return shown(bars_plot(computed.groups, b.stats, b.labels, b.title, b.ylabel, top=b.top))
    if not computed.curves:
        raise ValueError("the run has no story to plot")
    curve = computed.curves[0] if story is None else next((c for c in computed.curves if c.id == story), None)
    if curve is None:
        raise ConfigError(f"plot(): no story `{story}` in this run (its first ids: "
                          f"{', '.join(c.id for c in computed.curves[:5])})")
    return curve_plot(curve.id, curve.x, curve.y, computed.settings)


class _Statistics(_Result, kw_only=True):
    """A result of story and group statistics (score, metrics): its tables, the
    per-story frame, and the report's figures drawn from what was computed."""

    stories: Table | None
    groups: Table | None

    def _computed(self) -> ComputedMetrics | None:
        raise NotImplementedError

    def to_pandas(self) -> DataFrame:
        """The per-story statistics as a DataFrame."""
        return _frame(self.stories)

    def _shown(self) -> Table | None:
        return self.stories

    def plot(self, story: str | None = None, *, bars: str | None = None) -> Figure:
        """The report's figure of `story`'s no-rate curve (default: the first
        story's), or with `bars` ("nr", "ir", "retain") of the group bars."""
        return plot_computed(self._computed(), story, bars)


class ScoreResult(_Statistics, kw_only=True):
    """`score`: per-story statistics (stories.csv), group statistics with their
    intervals (groups.csv), the run record (run.json: ``run`` as plain data,
    ``header`` its typed header), as the run computed them; ``summary`` is the
    pipeline's RunSummary (requests, cache hits, failures, warnings)."""

    run: dict[str, Any] | None
    header: RunHeader | None
    summary: RunSummary
    # what is missing from the result, as the CLI prints it: each bad corpus record
    # (file, line, field) and each story that failed; the run can be "complete" (every
    # story it could read was worked on) and its exit status 1 because of them
    errors: list[str] = []

    def _computed(self) -> ComputedMetrics | None:
        return self.summary.computed

    def view(self, *, host: str = "127.0.0.1", port: int = 0, origin: str | None = None) -> View:
        """Serve the run's view (``tension-run view OUT``) from a background
        thread; returns its address (in a notebook an inline frame), ``stop()``
        ends it. Only `origin` (the notebook page's address, e.g.
        ``"http://localhost:8888"``; default: that of the Jupyter server that
        started this kernel) may frame it, under a per-view token in its url;
        with neither, it shows as a link, and says why."""
        return serve_view(self.out, host, port, origin)


class MetricsResult(_Statistics, kw_only=True):
    """`metrics`: per-story and group statistics of saved curves; ``errors`` are
    the lines that failed (file, line, field); ``computed`` the library's
    reports.metrics.MetricsResult (curves, kernel statistics, GroupStat)."""

    errors: list[str]
    computed: ComputedMetrics

    def _computed(self) -> ComputedMetrics | None:
        return self.computed


class EstimateResult(_Result, kw_only=True):
    """`estimate`: the Estimate (requests, tokens, cache coverage, GPU-hours,
    money; its ``run`` the run header) and the text the CLI prints."""

    estimate: Estimate
    text: str

    def _repr_html_(self) -> str:
        return super()._repr_html_() + f"<pre>{html.escape(self.text)}</pre>"

    def to_pandas(self) -> DataFrame:
        """One row: the estimate's scalar figures, nested ones flattened (`gpu_hours.total`)."""
        flat: dict[str, Any] = {}

        def walk(prefix: str, v: Any) -> None:
            if isinstance(v, dict):
                for k, x in v.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), x)
            elif not isinstance(v, list):
                flat[prefix] = v

        walk("", {k: v for k, v in msgspec.to_builtins(self.estimate).items() if k != "run"})
        return pandas().DataFrame([flat])


class CompareResult(_Result, kw_only=True):
    """`compare`: the paired comparison (B − A per statistic: means, difference,
    bootstrap interval, t-test) as reports.comparison.Comparison, and its tables."""

    comparison: Comparison
    markdown: str
    csv: str

    def to_pandas(self) -> DataFrame:
        return pandas().DataFrame([msgspec.to_builtins(r) for r in self.comparison.rows])

    def _repr_html_(self) -> str:
        return super()._repr_html_() + f"<pre>{html.escape(self.markdown)}</pre>"


class FairPlayMetricsResult(_Result, kw_only=True):
    """`fairplay_metrics`: per-story scores (stories.csv), groups (groups.csv),
    ``summary`` the reports.fairplay_metrics.FairPlaySummary."""

    stories: Table | None
    groups: Table | None
    summary: FairPlaySummary

    def to_pandas(self) -> DataFrame:
        return _frame(self.stories)

    def _shown(self) -> Table | None:
        return self.stories


class FairPlayResult(_Result, kw_only=True):
    """`fairplay`: the readers' run (``summary``: FairPlayRun) and its metrics
    (``metrics``: FairPlayMetricsResult, None when they did not run), the run
    record (fairplay_run.json: ``run``, ``header`` typed), as the run computed them."""

    metrics: FairPlayMetricsResult | None
    run: dict[str, Any] | None
    header: RunHeader | None
    summary: FairPlayRun

    def to_pandas(self) -> DataFrame:
        """The per-story fair-play scores as a DataFrame."""
        return _frame(self.metrics.stories if self.metrics is not None else None)

    def _shown(self) -> Table | None:
        return self.metrics.stories if self.metrics is not None else None

    def view(self, *, host: str = "127.0.0.1", port: int = 0, origin: str | None = None) -> View:
        """Serve the run's view from a background thread, as ScoreResult.view."""
        return serve_view(self.out, host, port, origin)


class GenerateResult(_Result, kw_only=True):
    """`generate`: the stories written (the lines of ``out``), the run record
    (STORIES.run.json: ``run``, ``header`` typed), as the run computed them,
    ``summary`` the pipeline's GenerateSummary."""

    stories: list[dict[str, Any]]
    run: dict[str, Any] | None
    header: RunHeader | None
    summary: GenerateSummary

    def to_pandas(self) -> DataFrame:
        return pandas().DataFrame(self.stories)


def _frame(table: Table | None) -> DataFrame:
    if table is None:
        pandas()  # the extra is named first, whatever else is missing
        raise ValueError("the run wrote no table (see its status and error)")
    return table.to_pandas()

"""The recall factories the view takes (core/view: `RecallFactory`, `CheckpointRecallFactory`):
what a finished run cached, read back by the run's own pipeline. Each imports its pipeline
only when a run of its kind is opened: the fair-play pipeline loads its own kernels and
scipy.special, which a view of score runs never uses (`view --export` of a score run:
2.07 → 1.72 s of CPU with the view's server left out too, bench/RESULTS.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tension.cache.store import Store
    from tension.core.pipelines.fairplay.recall import FairPlayRecall
    from tension.core.pipelines.score.recall import ScoreRecall

__all__ = ["score_recall", "fairplay_recall"]


def score_recall(run_record: dict[str, Any], store: Store) -> ScoreRecall:
    """A score run's `ScoreRecall`."""
    from tension.core.pipelines.score.recall import ScoreRecall

    return ScoreRecall(run_record, store)


def fairplay_recall(run_record: dict[str, Any], store: Store) -> FairPlayRecall:
    """A fair-play run's `FairPlayRecall`."""
    from tension.core.pipelines.fairplay.recall import FairPlayRecall

    return FairPlayRecall(run_record, store)

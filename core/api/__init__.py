"""The Python API: the verbs a researcher scripts, as functions (docs/python.md).

    verbs.py     score, estimate, metrics, compare, generate, and their *_async
                 twins; the CLI's verbs call them
    bench.py     bench and bench_async (the servers' figures estimate prices with)
    fairplay.py  fairplay, fairplay_metrics and their *_async twins
    settings.py  keyword arguments as settings (unknown or mistyped: ConfigError),
                 the server used when none is named
    results.py   the typed results, with to_pandas() (the optional extra `pandas`)
    tables.py    a verb's table (stories.csv, groups.csv, …) typed by column, as results hold it
    notebook.py  the origin of the notebook this kernel runs for (a view() it may frame)

``import tension`` re-exports them (core/tension/__init__.py)."""

from tension.core.api import bench as _bench_verbs
from tension.core.api import fairplay as _fairplay_verbs
from tension.core.api import results, tables, verbs
from tension.core.api.bench import *  # noqa: F403 (bench, bench_async, BenchResult)
from tension.core.api.fairplay import *  # noqa: F403 (fairplay, fairplay_metrics and their async twins)
from tension.core.api.results import *  # noqa: F403 (their __all__: the result types)
from tension.core.api.tables import *  # noqa: F403 (its __all__: Table)
from tension.core.api.verbs import *  # noqa: F403 (their __all__: the verbs and their async twins)

__all__ = verbs.__all__ + _bench_verbs.__all__ + _fairplay_verbs.__all__ + results.__all__ + tables.__all__

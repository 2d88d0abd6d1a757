"""How an API call runs, whichever verb it is: the rows or path it reads, the
argv its run record keeps (the call that reproduces it, or the CLI's command line),
the cache folder it opens, and the blocking form of its coroutine (a notebook's
running loop included)."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from tension.core.errors import ConfigError

if TYPE_CHECKING:  # only to type: `tension-run --help` and `import tension` load none of these
    from datasets import Dataset
    from pandas import DataFrame

__all__ = ["PathLike", "Records", "Columns", "CORPUS_COPY", "by_the_cli", "called_by_the_cli", "recorded",
           "given_input", "blocking", "run_cache"]

PathLike = str | Path
# Rows in memory, besides a path: a pandas DataFrame, a datasets.Dataset, an iterable
# of mappings, with the JSON Lines fields as columns (or renamed by `columns=`;
# core/inputs/tabular.py). Neither pandas nor datasets is a dependency: named to type only.
Records: TypeAlias = "DataFrame | Dataset | Iterable[Mapping[str, Any]]"
Columns = Mapping[str, str] | None


_PATH_KEYWORDS = ("out", "config", "cache", "json", "bench", "pilot", "tokenizer")

# Set while the CLI runs a verb: its run record's argv is then the command line
# (what "resume with the same command" repeats), not the API call the CLI made.
_BY_THE_CLI: contextvars.ContextVar[bool] = contextvars.ContextVar("tension_by_the_cli", default=False)


@contextlib.contextmanager
def by_the_cli() -> Iterator[None]:
    """The block in which the CLI calls the verbs (core/cli/__init__.py `main`)."""
    token = _BY_THE_CLI.set(True)
    try:
        yield
    finally:
        _BY_THE_CLI.reset(token)


@contextlib.contextmanager
def recorded(verb: str, first: PathLike, keywords: dict[str, Any]) -> Iterator[None]:
    """The block of a run whose record's argv is the call that reproduces it
    (``python -c "import tension; tension.score('/abs/c.jsonl', out=…, endings=3)"``,
    paths absolute, the key left out: it is given again or read from
    OPENAI_API_KEY), not the host process's argv (a notebook kernel's). Called by
    the CLI, the record keeps the command line."""
    from tension.core.run.lifecycle import INVOCATION

    if _BY_THE_CLI.get():
        yield
        return

    def literal(name: str, v: Any) -> str:
        if isinstance(v, os.PathLike) or (name in _PATH_KEYWORDS and isinstance(v, str)):
            v = os.path.abspath(v)
        return repr(v)

    args = [literal("out", first)] + [f"{k}={literal(k, v)}" for k, v in keywords.items()
                                       if v is not None and k != "api_key"]
    token = INVOCATION.set(["python", "-c", f"import tension; tension.{verb}({', '.join(args)})"])
    try:
        yield
    finally:
        INVOCATION.reset(token)


def given_input(verb: str, what: str, value: PathLike | Records, columns: Columns, where: Path) -> PathLike:
    """The path a verb reads: `value` itself, or its rows written as JSON Lines at
    `where` (row N on line N: a bad row's error names its row and field, as for a
    .jsonl file; the stories the same, so the cache keys too)."""
    from tension.core.inputs.tabular import is_rows, rows_of, write_rows

    if value is None:
        raise ConfigError(f"{verb}(): `{what}` is None: give a path (JSON Lines, CSV, Parquet, a folder of .txt), "
                          "a pandas DataFrame, a datasets.Dataset or a list of dicts")
    if not is_rows(value):
        if columns:
            raise ConfigError(f"{verb}(): `columns` renames the columns of rows in memory (a DataFrame, a Dataset, "
                              "a list of dicts); a file's fields are named as the docs say")
        return cast("PathLike", value)  # a path
    where.parent.mkdir(parents=True, exist_ok=True)
    return write_rows(rows_of(value, columns), where)
CORPUS_COPY = "corpus.jsonl"  # OUT/corpus.jsonl: a corpus given as rows, as the run read it


T = TypeVar("T")


def blocking(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    from tension.core.run.blocking import run_blocking

    return run_blocking(make_coro)


def called_by_the_cli() -> bool:
    """Whether the CLI called this verb (its errors then name flags, not keywords)."""
    return _BY_THE_CLI.get()


def run_cache(cache: str | None) -> str:
    """The cache folder a run opens: `cache`, else the default one."""
    if cache is not None:
        return os.path.expanduser(cache)
    from tension.cache.store import default_path

    return str(default_path())

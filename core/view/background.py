"""The view served from a thread of this process (a notebook's ``result.view()``):
the same site `tension-run view` serves, on its own event loop, until stopped."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from tension.core.view.fairplay_run import CheckpointRecallFactory
from tension.core.view.score_run import RecallFactory, Stores

__all__ = ["BackgroundView", "start_view"]


class BackgroundView:
    """A view being served: its address (``url``) and ``stop()`` (idempotent: the
    server closes its socket, the thread ends, the cache is closed)."""

    def __init__(self, thread: threading.Thread, loop: asyncio.AbstractEventLoop, task: asyncio.Task[None],
                 url: str):
        self.thread, self.loop, self.task, self.url = thread, loop, task, url

    def stop(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.task.cancel)
            self.thread.join()

    def __repr__(self) -> str:
        return f"BackgroundView({self.url!r}, {'serving' if self.thread.is_alive() else 'stopped'})"


def start_view(dirs: Sequence[str], *, host: str = "127.0.0.1", port: int = 0, cache: str | None = None,
               score_recall: RecallFactory | None = None,
               fairplay_recall: CheckpointRecallFactory | None = None) -> BackgroundView:
    """Serve the runs' view from a daemon thread; returns once the socket listens
    (port 0: a free one, named in the url). A run folder it cannot read raises
    here, in the caller's thread."""
    from tension.core.view import open_runs
    from tension.core.view.app import serve
    from tension.core.view.site import Site

    stores = Stores()
    try:
        site = Site(open_runs(list(dirs), stores, score_recall, fairplay_recall, cache))
    except BaseException:
        stores.close()
        raise
    listening = threading.Event()
    started: dict[str, object] = {}

    def ready(url: str) -> None:
        started["url"] = url
        listening.set()

    def main() -> None:
        loop = asyncio.new_event_loop()
        task = loop.create_task(serve(site, host, port, ready))
        started["loop"], started["task"] = loop, task
        try:
            loop.run_until_complete(task)
        except BaseException as e:  # cancelled by stop(), or the socket refused
            if not isinstance(e, asyncio.CancelledError):
                started["error"] = e
        finally:
            stores.close()
            loop.close()
            listening.set()

    thread = threading.Thread(target=main, name="tension-view", daemon=True)
    thread.start()
    listening.wait()
    if "error" in started:
        thread.join()
        raise started["error"]  # type: ignore[misc]
    return BackgroundView(thread, started["loop"], started["task"], str(started["url"]))  # type: ignore[arg-type]

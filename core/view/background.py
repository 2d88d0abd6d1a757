"""The view served from a thread of this process (a notebook's ``result.view()``):
the same site `tension-run view` serves, on its own event loop, until stopped.
Given the notebook's origins, it may be framed by them under a per-view token
(core/view/app.py `Framing`): ``embed_url``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tension.core.view.fairplay_run import CheckpointRecallFactory
from tension.core.view.score_run import RecallFactory, Stores

if TYPE_CHECKING:
    from tension.core.view.app import Framing

__all__ = ["BackgroundView", "start_view"]


class BackgroundView:
    """A view being served: its address (``url``), the address under its token that
    ``frame_origins`` alone may frame (``embed_url``; None when it was given none),
    and ``stop()`` (idempotent: the server closes its socket, the thread ends, the
    cache is closed)."""

    def __init__(self, thread: threading.Thread, loop: asyncio.AbstractEventLoop, task: asyncio.Task[None],
                 url: str, frame: Framing | None = None):
        self.thread, self.loop, self.task, self.url = thread, loop, task, url
        self.embed_url = f"{url}{frame.token}/" if frame is not None else None
        self.frame_origins = frame.origins if frame is not None else ()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.task.cancel)
            self.thread.join()

    def __repr__(self) -> str:
        return f"BackgroundView({self.url!r}, {'serving' if self.thread.is_alive() else 'stopped'})"


def start_view(dirs: Sequence[str], *, host: str = "127.0.0.1", port: int = 0, cache: str | None = None,
               score_recall: RecallFactory | None = None,
               fairplay_recall: CheckpointRecallFactory | None = None,
               frame_origins: Sequence[str] = ()) -> BackgroundView:
    """Serve the runs' view from a daemon thread; returns once the socket listens
    (port 0: a free one, named in the url). A run folder it cannot read, or an
    origin that is not one (ConfigError), raises here, in the caller's thread.
    `frame_origins`: the origins that may frame it under a new token (``embed_url``)."""
    from tension.core.view import open_runs
    from tension.core.view.app import framing, serve
    from tension.core.view.site import Site

    frame = framing(frame_origins) if frame_origins else None
    stores = Stores()
    try:
        site = Site(open_runs(list(dirs), stores, score_recall, fairplay_recall, cache))
    except BaseException:
        stores.close()
        raise
    started = _Started()

    def ready(url: str) -> None:
        started.url = url
        started.listening.set()

    def main() -> None:
        loop = asyncio.new_event_loop()
        started.loop, started.task = loop, loop.create_task(serve(site, host, port, ready, frame))
        try:
            loop.run_until_complete(started.task)
        except asyncio.CancelledError:
            pass  # stop()
        except BaseException as e:  # the socket refused (a port in use): raised in the caller's thread
            started.error = e
        finally:
            stores.close()
            loop.close()
            started.listening.set()

    thread = threading.Thread(target=main, name="tension-view", daemon=True)
    thread.start()
    started.listening.wait()
    if started.error is not None or started.loop is None or started.task is None:
        thread.join()
        raise started.error or RuntimeError("the view did not start")
    return BackgroundView(thread, started.loop, started.task, started.url, frame)


class _Started:
    """What the serving thread tells the caller: the address, or why it failed."""

    def __init__(self) -> None:
        self.listening = threading.Event()
        self.url = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

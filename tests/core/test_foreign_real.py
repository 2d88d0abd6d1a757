"""The real llama.cpp `llama-server` serving the bundled GGUF model, and LiteLLM's
proxy in front of it (slow: .ci/run's step 3; both installed once into the user
cache by tension.testing.llamacpp). The defaults scaled down (`--endings 20`, no
`--tokenizer`): score, its cached rerun (nothing sent), generate, fairplay, bench,
and score through LiteLLM (issue 26)."""

from __future__ import annotations

import json
import os
import secrets
import urllib.request
from pathlib import Path

import pytest
from fairplay_scripted import story_record, write_jsonl

from tension.core.cli import main
from tension.core.llm.vllm_router import free_port
from tension.testing.corpus import EMBEDDED_STORY as STORY
from tension.testing.foreign_procs import running

pytestmark = pytest.mark.slow

ALIAS = "smollm2"  # F9: without --alias, llama-server names the model by the GGUF's absolute path
SLOTS = 4
# the defaults scaled down: 20 endings; a few late positions keep CI's budget. The 135M
# model's judge settings, as the embedded profile has them (core/serving/profiles.py): asked
# free text it answers neither Y nor N (58 of 60 in CI, the malformed-judge stop, exit 1), so
# its first token's Y-vs-N logprobs decide, which llama.cpp returns as vLLM does.
SCALED = ["--endings", "20", "--max-tokens", "48", "--pct-min", "0.7", "--min-words", "100", "--timeout", "600",
          "--judge-constraint", "logprobs", "--judge-max-tokens", "1", "--no-progress"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from tension.testing.llamacpp import ensure_gguf, ensure_llama_server, no_repack_on_amx, real_cache

    with real_cache():  # the one build, under the real cache folder
        binary, gguf = ensure_llama_server(), ensure_gguf()
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-c", str(4096 * SLOTS),
           "-np", str(SLOTS), "-t", "2", "--alias", ALIAS, "--metrics", *no_repack_on_amx()]
    url = f"http://127.0.0.1:{port}"
    with running("llama-server", cmd, log, url + "/health"):  # F11: stopped with SIGKILL if SIGTERM hangs
        yield url


def _decoded(url: str) -> float:
    """llama.cpp's count of prompt tokens processed (its /metrics): what it was sent."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total")))


def _story(tmp_path: Path) -> Path:
    p = tmp_path / "story.jsonl"
    p.write_text(json.dumps({"id": "baker", "text": STORY}) + "\n")
    return p


def test_score_its_cached_rerun_and_bench(llama, tmp_path, capsys):
    story = _story(tmp_path)
    base = ["--base-url", llama, "--model", ALIAS, "--cache", str(tmp_path / "cache"), "--seed", "1"]
    assert main(["score", str(story), "--out", str(tmp_path / "a"), *base, *SCALED]) == 0, capsys.readouterr().err
    rec = json.loads((tmp_path / "a" / "run.json").read_text())
    (server,) = rec["servers"]
    assert server["kind"] == "llamacpp" and server["slots"] == SLOTS and server["tokenize"] == "llamacpp"
    assert server["capacity"]["peak_in_flight"] <= SLOTS and rec["http"]["retries"] == 0
    rows = [json.loads(x) for x in (tmp_path / "a" / "positions.jsonl").read_text().splitlines()]
    assert rows and all(r["n_endings"] == 20 for r in rows)  # 20 on 4 slots: in chunks

    before = _decoded(llama)
    assert main(["score", str(story), "--out", str(tmp_path / "b"), *base, *SCALED]) == 0
    again = json.loads((tmp_path / "b" / "run.json").read_text())
    assert again["http"]["attempts"] == 0 and _decoded(llama) == before  # nothing sent, by both counts
    assert (tmp_path / "a" / "positions.jsonl").read_bytes() == (tmp_path / "b" / "positions.jsonl").read_bytes()

    capsys.readouterr()  # the runs' output above: what bench says is its own
    code = main(["bench", "--corpus", str(story), "--base-url", llama, "--model", ALIAS, "--positions", "2",
                 "--endings", "4", "--max-tokens", "32", "--no-variants", "--no-progress",
                 "--save", str(tmp_path / "bench.json")])
    said = capsys.readouterr()  # a failed request is named on stdout (bench's errors), its cause maybe on stderr
    assert code == 0, f"bench exited {code}\n--- its stdout ---\n{said.out}\n--- its stderr ---\n{said.err}"
    fig = json.loads((tmp_path / "bench.json").read_text())
    assert fig["mean_ending_tokens"] > 8  # every choice counted (F4: 1/n of it before)


def test_generate_and_fairplay(llama, tmp_path, capsys):
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text(json.dumps({"id": "lamp", "idea": "A lighthouse keeper finds a letter dated next year."}) + "\n")
    code = main(["generate", str(ideas), "--out", str(tmp_path / "stories.jsonl"), "--mode", "vanilla",
                 "--base-url", llama, "--model", ALIAS, "--max-tokens", "64", "--cache", str(tmp_path / "cache"),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "stories.jsonl").read_text().splitlines()[0])["text"].strip()

    stories = write_jsonl(tmp_path / "who.jsonl", [story_record("s1", generator=False)])
    code = main(["fairplay", str(stories), "--out", str(tmp_path / "fp"), "--reader-base-url", llama,
                 "--reader-model", ALIAS, "--readers", "gullible", "--reader-constraint", "json",
                 "--cache", str(tmp_path / "cache"), "--no-progress", "--max-plots", "0", "--resamples", "50",
                 "--parse-retries", "0", "--k", "2", "--reader-max-tokens", "96"])
    # A 135M model may not give usable probabilities (exit 1, said, the values null), but
    # the run completes; the JSON constraint goes as llama.cpp's response_format.
    assert code in (0, 1), capsys.readouterr().err
    rec = json.loads((tmp_path / "fp" / "fairplay_run.json").read_text())
    assert rec["status"] == "complete"
    assert rec["servers"] and rec["servers"][0]["constraint"] == "grammar"


@pytest.fixture
def litellm(llama, tmp_path, monkeypatch):
    from tension.testing.llamacpp import ensure_litellm, real_cache

    with real_cache():
        exe = ensure_litellm()
    port = free_port()
    key = "sk-" + secrets.token_hex(24)  # the proxy refuses to start without a strong master key
    # OPENAI_API_KEY: what it sends upstream (llama-server checks none); the cost map is
    # read from the package, not fetched (no network)
    env = {**os.environ, "OPENAI_API_KEY": "sk-upstream", "LITELLM_MASTER_KEY": key,
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    cmd = [str(exe), "--model", f"openai/{ALIAS}", "--api_base", llama + "/v1", "--host", "127.0.0.1",
           "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with running("LiteLLM", cmd, tmp_path / "litellm.log", url + "/health/liveliness", seconds=600, env=env):
        monkeypatch.setenv("OPENAI_API_KEY", key)  # the tool's key is the proxy's master key
        yield url, key


def test_score_through_litellm(litellm, tmp_path, capsys):
    """LiteLLM says owned_by openai and passes llama.cpp's 400 on: the n limit is
    learned from it; it has no /tokenize, so words count pct."""
    url, key = litellm
    story = _story(tmp_path)
    out = tmp_path / "o"
    ask = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(ask, timeout=30) as r:
        model = json.loads(r.read())["data"][0]["id"]
    code = main(["score", str(story), "--out", str(out), "--base-url", url, "--model", model,
                 "--cache", str(tmp_path / "cache"), "--tokenizer", "words", *SCALED])
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(x) for x in (out / "positions.jsonl").read_text().splitlines()]
    assert rows and all(r["n_endings"] == 20 for r in rows)
    (server,) = json.loads((out / "run.json").read_text())["servers"]
    assert server["max_n"] == SLOTS and server["max_n_from"] == "HTTP 400"

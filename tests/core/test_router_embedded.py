"""Two real embedded vLLM CPU servers behind the real vLLM router (slow: CI runs it
in its own step). A story per server, each server's prefix cache serving its own
story's judge prompts, the figures from both servers' /metrics in run.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest

import tension
from tension.core.llm.vllm_router import free_port
from tension.core.serving import embedded
from tension.core.serving.install import ensure_installed, ensure_model, patch_seed_rewind
from tension.core.serving.profiles import EMBEDDED_SCORE_SETTINGS
from tension.testing.corpus import EMBEDDED_STORY as STORY

pytestmark = pytest.mark.slow

# Written for this test: a second story, as long, of other words.
STORY_2 = (
    "The lighthouse keeper on Gull Rock wrote the weather into a ledger every evening at exactly six o'clock. "
    "One October night she found a page already filled in, in a hand that was neater than hers but used her words. "
    "The entry described a storm that had not yet come, with the wind from the north-east and the glass falling fast. "
    "She locked the ledger in the drawer of her desk and sat up all night listening to a perfectly calm sea. "
    "At dawn the boatman brought the mail and laughed when she asked whether anyone else had been on the rock. "
    "The next evening there was a new entry waiting for her, describing the boatman's boat overturned near the reef. "
    "She rowed across to the village in the afternoon and begged the boatman to stay in the harbour the next day. "
    "He promised, mostly to calm her, and she rowed back to the rock as the first real clouds rolled in from the north-east. "
    "The storm came at midnight exactly as the ledger had said, and she kept the lamp burning until the glass stopped falling. "
    "In the morning the boatman's boat was still tied up in the harbour, and the ledger's last page was blank again. "
    "She never found out who had written in it, but she always left the page after hers empty, just in case."
)


@pytest.fixture
def two_servers(monkeypatch):
    from tension.testing.real_env import REAL_ENV

    for k in ("HOME", "XDG_CACHE_HOME"):  # the one real installation of the server
        if k in REAL_ENV:
            monkeypatch.setenv(k, REAL_ENV[k])
        else:
            monkeypatch.delenv(k, raising=False)
    p = embedded.paths()
    ensure_installed(embedded.EmbeddedSettings(), p)
    patch_seed_rewind(p.venv)
    model_dir = ensure_model(p)
    procs, urls = [], []
    try:
        for _ in range(2):
            # two servers on 2 cores: each keeps vLLM's reserved core, as before the demo's
            # default of none (docs/embedded.md), so their model threads do not all share both cores
            s = embedded.EmbeddedSettings(port=free_port(), kv_cache_gib=1, reserved_cpus=1)
            with open(p.root / f"router-test-{s.port}.log", "wb") as log:  # the server keeps its own copy
                procs.append(subprocess.Popen(embedded.serve_command(p.python, model_dir, s), stdout=log,
                                              stderr=subprocess.STDOUT, env=embedded.server_env(p.root, s),
                                              start_new_session=True))
            urls.append(f"http://127.0.0.1:{s.port}")
        deadline = time.monotonic() + 900
        for url, proc in zip(urls, procs):
            while not _healthy(url):
                assert proc.poll() is None, f"the server at {url} exited with {proc.returncode}"
                assert time.monotonic() < deadline, f"the server at {url} was not ready in 900 s"
                time.sleep(1)
        yield urls
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_two_embedded_servers_behind_the_router_each_serve_a_story_from_their_prefix_cache(two_servers, tmp_path):
    corpus = tmp_path / "two.jsonl"
    corpus.write_text(json.dumps({"id": "bakery", "text": STORY}) + "\n"
                      + json.dumps({"id": "lighthouse", "text": STORY_2}) + "\n")
    cfg = {  # the API's keywords
        **EMBEDDED_SCORE_SETTINGS, "base_url": ",".join(two_servers), "model": embedded.MODEL_ID,
        "endings": 4, "max_tokens": 32, "min_words": 50, "cache": str(tmp_path / "cache"), "seed": 1,
        "gen_concurrency": 2, "judge_concurrency": 8, "progress": False, "report": False}
    s = tension.score(corpus, out=tmp_path / "out", **cfg).summary
    assert s.status == "complete", s.error
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    gen = run["replicas"]["generation"]
    assert [g["url"] for g in gen] == two_servers
    assert all(g["router"] and g["up"] and g["failures"] == 0 for g in gen)
    # two stories, two servers: the router sent the second story to the idle one
    assert all(g["requests"] > 0 for g in gen), gen
    # each server's own /metrics: its story's judge prompts share the continuation
    assert all(g["prefix_cache_hit_rate"] is not None and g["prefix_cache_hit_rate"] > 0 for g in gen), gen
    # the router counts HTTP requests: the judge's prompts went batched (issue 19), one
    # /v1/completions request for a position's warm-up prompt and one for the rest
    batch = run["judge_batch"]
    assert batch["batched"] and batch["prompts"] == s.requests["judge"] and batch["requests"] < s.requests["judge"]
    assert sum(g["requests"] for g in gen) == s.requests["generation"] + s.requests["tokenize"] + batch["requests"]
    print("\nFIGURES router+2 embedded:", json.dumps([{k: g[k] for k in ("url", "requests",
                                                                         "prefix_cache_hit_rate")} for g in gen]))

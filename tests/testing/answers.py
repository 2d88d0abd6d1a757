"""The fake answer model: the rules that decide what a fake OpenAI-compatible
server answers, shared by both doors to it, the HTTP test server
(`tension.testing.openai_server.LoopbackServer`, the wire) and the in-process
transport (`tension.testing.inprocess.InProcessServer`, no sockets). So a pipeline
spec gets the same endings, verdicts, readers' (scripted) answers, usage, prefix-cache
counts, errors and faults on either, and a test says which door it needs.

The rules are documented where the HTTP server is (the docstring of
tension.testing.openai_server). `AnswerModel` is the brain a door mixes in: it asks
scripted answers first (`respond`, `script`), then the answer rules (rules.py:
`expected_endings`, `expected_verdict`, `misbehaving`, …), applies the server's
dialect, limits and claims, and counts usage (`count_tokens`, tokens.py) and
`cached_tokens` (the prefix cache, info.py). Its parts, each a module of this
package: the settings (settings.py: `AnswerSettings`, what either door answers;
`WireSettings`, the HTTP server's alone), chat messages and the template
(messages.py), vLLM's validation errors (validation.py), records (records.py),
planned faults (faults.py), the token routes (tokens.py), the server's own info and
counters (info.py) and streamed answers (streaming.py). A door reads a body, takes
a fault (`_take_fault`), asks for a payload and sends it. Like the server, it
imports nothing from `tension`: it is a fixed point the code under test is measured
against.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .faults import FaultPlan
from .info import ServerInfo
from .messages import check_messages, classify, content_text, parse_rendered
from .records import RecordBook
from .rules import (
    completion_logprobs,
    expected_endings,
    expected_verdict,
    llamacpp_constrained,
    logprobs,
    misbehaving,
    renumbered,
)
from .settings import CHAT_PATH, COMPLETIONS_PATH, PROBE_HEADER, SEEDS
from .tokens import TokenRoutes, count_answer, count_tokens
from .validation import BadRequest, check_model, check_sampling

_DRAWS = itertools.count()  # the draws of a server that ignores seeds (`seeds="ignored"`)
# An answer's id: unique in the process, as vLLM's (a random uuid4 per answer cost more
# than the rest of an answer on this machine's urandom; no test reads more than its prefix).
_answer_ids = itertools.count(1)


def _answer_id(prefix: str) -> str:
    return f"{prefix}-{next(_answer_ids):032x}"


@dataclass(eq=False)
class Visit:
    """One request while a door serves it (`AnswerModel._arrive`): whether it is the
    tool's probe (PROBE_HEADER: recorded apart), and for a chat request the chat
    requests it shared the server with (`seeds="arrival"`)."""

    probe: bool
    chat: bool
    peers: int = 0


# The request the running handler serves: its door sets it on arrival, in the handler's own task, so
# the answer's maker (`_contents`), called in that task, finds it.
_VISIT: contextvars.ContextVar[Visit | None] = contextvars.ContextVar("visit", default=None)


class AnswerModel(RecordBook, FaultPlan, ServerInfo, TokenRoutes):
    """The answers' state and makers, for a door to mix in (LoopbackServer,
    InProcessServer). The door sets `models`, `model` and every `AnswerSettings`
    field as plain attributes (a test may set them at any time) and calls
    `_init_model_state` once."""

    models: tuple[str, ...]
    model: str
    empty_rate: float
    yes_rate: float
    malformed_rate: float
    misbehave: str | None
    refuse: str | None
    max_n: int
    n_refusal: str | None
    misnumber: str | None
    misnumber_paths: tuple[str, ...]
    seeds: str
    answer_model: str | None
    fixed_usage: tuple[int, int, int] | None

    def _init_model_state(self) -> None:
        """Records, faults, scripted answers, the token vocabulary, the prefix cache
        and the /metrics counters, all empty."""
        if self.seeds not in SEEDS:  # a misspelt setting would hold seeds without a word
            raise ValueError(f"seeds: expected one of {SEEDS}, got {self.seeds!r}")
        self._lock = threading.Lock()
        self.responders: list[Callable[[list[dict], int, Any], Any]] = []  # see `respond`
        # unseeded requests per messages, on a server giving fewer choices (made on the server's loop, or on
        # each in-process caller's thread: under the lock)
        self._draws: dict[str, int] = {}
        self._visiting: set[Visit] = set()  # chat requests being served (`_arrive`)
        self._init_records()
        self._init_faults()
        self._init_vocabulary()
        self._init_counters()

    # ------------------------------------------------------------ scripted answers

    def respond(self, fn) -> None:
        """Script answers by prompt content: ``fn(messages, n, seed)`` returns the
        choices' contents (a list of n strings, or one string for every choice), or
        None to leave the request to the next responder and then to the default
        answers above. Responders are asked in the order they were added; the
        request's kind (`classify`) is unchanged."""
        with self._lock:
            self.responders.append(fn)

    def script(self, contains: str, answer: Any) -> None:
        """Chat requests whose message contents (any role) contain `contains` get
        `answer` as each choice instead of the hash-made text: a string, or a
        function ``answer(messages, seed, i) -> str`` for choice i (seed as sent, or
        None). A responder like those of `respond`, asked in the same order."""
        def fn(msgs, n, seed):
            if contains not in "\n".join(content_text(m.get("content")) for m in msgs):
                return None
            return [answer(msgs, seed, i) if callable(answer) else answer for i in range(n)]

        self.respond(fn)

    def clear_scripts(self) -> None:
        """Forget every scripted answer (`script` and `respond`)."""
        with self._lock:
            self.responders.clear()

    def _scripted(self, msgs: list[dict], n: int, seed: Any) -> list[str] | None:
        with self._lock:
            responders = list(self.responders)
        for fn in responders:
            out = fn(msgs, n, seed)
            if out is not None:
                return [out] * n if isinstance(out, str) else list(out)[:n]
        return None

    # ----------------------------------------------------------------- in flight

    def _arrive(self, headers: Mapping[str, str] | None, chat: bool) -> Visit:
        """A request came (a door calls it first, and `_leave` last): marked if it is the
        tool's probe; a chat request counts the others in flight as its peers and is
        counted by them (continuous batching's shared batch: `seeds="arrival"`)."""
        visit = Visit(probe=bool(headers and headers.get(PROBE_HEADER)), chat=chat)
        if chat:
            # the in-process door serves every thread's loop (two blocking runs from two threads): one lock
            with self._lock:
                for other in self._visiting:
                    other.peers += 1
                visit.peers = len(self._visiting)
                self._visiting.add(visit)
        _VISIT.set(visit)
        return visit

    def _leave(self, visit: Visit) -> None:
        with self._lock:
            self._visiting.discard(visit)
        _VISIT.set(None)

    # --------------------------------------------------------------------- answers

    def _chat_payload(self, body: dict, fault: str | None = None) -> dict:
        """The answer to a chat request, as its claims say (`_claimed`)."""
        return self._claimed(CHAT_PATH, self._chat_answer(body, fault))

    def _claimed(self, path: str, payload: dict) -> dict:
        """What the answer to `path` claims beyond its texts, as a proxy in front may
        change it: its choices' indexes (`misnumber` on `misnumber_paths`) and the
        model it names (`answer_model`), and its usage (`fixed_usage`)."""
        if self.misnumber and path in self.misnumber_paths:
            payload = {**payload, "choices": renumbered(self.misnumber, payload["choices"])}
        if self.answer_model:
            payload = {**payload, "model": self.answer_model}
        if self.fixed_usage is not None and "usage" in payload:
            prompt, completion, cached = self.fixed_usage
            payload = {**payload, "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                            "total_tokens": prompt + completion,
                                            "prompt_tokens_details": {"cached_tokens": cached}}}
        return payload

    def _chat_answer(self, body: dict, fault: str | None = None) -> dict:
        """The answer to a chat request as the model makes it (before its claims)."""
        check_model(body, self.models)
        if refused := sorted(f for f in self.refuse_fields if f in body):
            raise BadRequest(422, "Unexpected fields in the request: {" + ", ".join(map(repr, refused)) + "}",
                             "invalid_request_error")
        msgs = check_messages(body.get("messages"))
        n, max_tokens, seed = check_sampling(body)
        texts = [content_text(m.get("content")) for m in msgs]
        prompt_tokens = self._within_limits(texts, n, max_tokens)
        contents, finish = self._contents(body, msgs, n, seed, fault)

        cached = self._cached_tokens("\x1e".join(texts), prompt_tokens)
        completion_tokens = sum(count_answer(c) for c in contents)
        if self.dialect == "llamacpp":  # llama.cpp's usage counts one choice
            completion_tokens = count_answer(contents[-1]) if contents else 0
        self._counted(prompt_tokens, cached, completion_tokens)
        return {
            "id": _answer_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": text},
                 "logprobs": logprobs(text or "", getattr(self, "yn_logprobs", False))
                 if body.get("logprobs") and not self.drop_logprobs else None,
                 "finish_reason": finish, "stop_reason": None}
                for i, text in enumerate(contents)
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }

    def _within_limits(self, texts: list[str], n: int, max_tokens: int | None) -> int:
        """The prompt's tokens, once the request is within the server's limits: its
        content filter (`refuse`), llama.cpp's slots, the context; else the server's 400."""
        if self.refuse and any(self.refuse in t for t in texts):
            raise BadRequest(400, "the request was refused by the server's content filter", "BadRequestError")
        llama = self.dialect == "llamacpp"
        if llama and n > self.slots:
            raise BadRequest(400, f"Field 'n': Value must be between 1 <= value <= {self.slots}, but got {n}",
                             "invalid_request_error", "n")
        prompt_tokens = sum(count_tokens(t) for t in texts)
        asked = prompt_tokens + (max_tokens or 0)
        if llama and asked > self.max_model_len:
            raise BadRequest(400, f"request ({asked} tokens) exceeds the available "
                             f"context size ({self.max_model_len} tokens), try increasing it",
                             "exceed_context_size_error")
        if asked > self.max_model_len:
            raise BadRequest(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {asked} tokens ({prompt_tokens} in "
                f"the messages, {max_tokens or 0} in the completion). Please reduce the length "
                f"of the messages or completion.",
                "BadRequestError", "max_tokens")
        return prompt_tokens

    def _draw(self, msgs: list[dict]) -> int:
        """How many unseeded requests for `msgs` came before this one (`_contents`)."""
        key = json.dumps(msgs, sort_keys=True)
        with self._lock:  # the in-process door: several threads' runs
            k = self._draws.get(key, 0)
            self._draws[key] = k + 1
        return k

    def _contents(self, body: dict, msgs: list[dict], n: int, seed: Any,
                  fault: str | None) -> tuple[Sequence[str | None], str]:
        """(the choices' texts, their finish reason): scripted answers first, else the
        rules by the request's kind; then a misbehaving model, the dialect's
        constraints and n limits, and a content fault."""
        kind = classify(msgs)
        visit = _VISIT.get()
        # scripted answers are a test's, for the run's requests (as planted faults are): the tool's probe
        # gets the rules' answers
        scripted = None if visit is not None and visit.probe else self._scripted(msgs, n, seed)
        contents: list[Any]
        if scripted is not None:
            contents = scripted
        elif kind == "generation" and self.sampling == "greedy" and not samples(body):
            contents = expected_endings(msgs, 1, None, self.empty_rate)[:1] * n  # its greedy text, n times
        elif kind == "generation" and self.seeds == "ignored":  # drawn anew: the seed stands for nothing
            contents = expected_endings(msgs, n, (seed or 0) + 10**9 * (1 + next(_DRAWS)), self.empty_rate)
        elif kind == "generation" and self.seeds == "arrival" and isinstance(seed, int):
            # the seed mixed with the requests it shared the server with: alone, its own draw
            contents = expected_endings(msgs, n, seed + 10**9 * (visit.peers if visit else 0), self.empty_rate)
        elif kind == "generation" and seed is None and (self.dialect == "llamacpp_python" or self.max_n > 0):
            # A server giving fewer choices than asked, unseeded: each request it answers is a draw of its
            # own (a real one samples anew), so the follow-ups for the rest are not copies of its first
            # choice: the k-th unseeded request for these messages, as if seeded apart from every seed sent.
            contents = expected_endings(msgs, n, -(1 + self._draw(msgs)) * 10**6, self.empty_rate)
        elif kind == "generation":
            contents = expected_endings(msgs, n, seed, self.empty_rate)
        elif kind == "judge":
            contents = [expected_verdict(msgs, self.yes_rate, self.malformed_rate)] * n
        else:
            contents = ["OK"] * n
        if self.misbehave and scripted is None:
            contents = misbehaving(self.misbehave, kind, msgs, contents)
        finish = "length" if self.misbehave == "think" else "stop"
        if self.dialect in ("llamacpp", "llamacpp_python"):
            contents = llamacpp_constrained(body, contents)
        if self.dialect == "llamacpp_python":
            contents = contents[:1]  # llama-cpp-python drops `n` (exclude={"n", …}): always one choice
        if self.max_n > 0 and self.n_refusal and n > self.max_n:  # a hosted API's wording of the limit
            raise BadRequest(400, self.n_refusal.format(max_n=self.max_n, n=n), "invalid_request_error")
        if self.max_n > 0:
            contents = contents[: self.max_n]
        if fault == "few_choices":
            contents = contents[: n // 2]
        elif fault == "empty_content":
            contents = [""] * len(contents)
        return contents, finish

    def _completions_payload(self, body: dict, fault: str | None = None) -> dict:
        """Each prompt read back into messages and answered as a chat request with the
        same parameters (and faults applied to the whole answer); usage summed."""
        prompts = body.get("prompt")
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
            raise BadRequest(400, "prompt: expected a string or a non-empty list of strings", "BadRequestError",
                             "prompt")
        params = {k: v for k, v in body.items() if k not in ("prompt", "logprobs", "add_special_tokens", "echo")}
        choices, usage = [], {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        for p, prompt in enumerate(prompts):
            answer = self._chat_answer({**params, "messages": parse_rendered(prompt)})
            for ch in answer["choices"]:
                text = ch["message"]["content"]
                choices.append({"index": p * len(answer["choices"]) + ch["index"], "text": text,
                                "logprobs": completion_logprobs(text) if body.get("logprobs") else None,
                                "finish_reason": ch["finish_reason"], "stop_reason": None})
            u = answer["usage"]
            usage["prompt_tokens"] += u["prompt_tokens"]
            usage["completion_tokens"] += u["completion_tokens"]
            usage["cached_tokens"] += u["prompt_tokens_details"]["cached_tokens"]
        if fault == "few_choices":
            choices = choices[: len(choices) // 2]
        elif fault == "empty_content":
            for ch in choices:
                ch["text"] = ""
        return self._claimed(COMPLETIONS_PATH, {
                "id": _answer_id("cmpl"), "object": "text_completion", "created": int(time.time()),
                "model": body.get("model") or self.model, "choices": choices,
                "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                          "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                          "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]}}})


def samples(body: dict) -> bool:
    """Whether a request switches sampling on as transformers serve reads it: its
    `generation_config` field, a JSON text (or object) with "do_sample": true."""
    gc = body.get("generation_config")
    if isinstance(gc, str):
        try:
            gc = json.loads(gc)
        except ValueError:
            return False
    return isinstance(gc, dict) and gc.get("do_sample") is True

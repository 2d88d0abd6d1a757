"""Many chat requests as one /v1/completions request: the judge's batched path.

A position's n judge requests differ only in the ending inside their user message.
Sent one by one they cost n HTTP round trips, and the client's CPU per round trip
is what limits a run on a fast node. vLLM answers /v1/completions with a list of
prompts, so the n requests can travel as one, provided each prompt is exactly the
text the chat endpoint would have built:

1. The server renders its own chat template once per run, for the request's
   system message and a user message that is one sentinel character:
   ``/tokenize`` with messages (add_generation_prompt, the request's
   chat_template_kwargs), then ``/detokenize`` of those ids. The text splits at
   the sentinel into a prefix and a suffix; a request's prompt is
   prefix + its user text + suffix.
   Only a server whose /v1/models says ``owned_by: vllm`` is asked (`auto`); any
   other OpenAI-compatible server gets chat requests, without a probe.
2. The first request of the run is checked: the token ids of its messages (as the
   chat endpoint builds them) must equal the token ids of its prompt text (as
   /v1/completions builds them, with ``add_special_tokens: false``: the template
   already holds them). Any difference, or a server without these endpoints,
   and the role sends chat requests as before (`auto`), or the run stops (`on`).
   Behind vllm-router every worker is checked: each must say it is vLLM and
   render the same template, else the role sends chat requests, naming the
   worker (a vLLM server mixed with llama.cpp's or another).
3. An answer is used only when it is what was asked: its choices numbered 0 …
   k − 1, each once (core/llm/answer_checks.py; a server or proxy that numbers
   them all 0 would give every prompt another's verdict). A misnumbered answer,
   or a /v1/completions that a worker turns out not to have (HTTP 404), makes
   the role send chat requests for the rest of the run, said once (`auto`;
   `on` stops the run), and the batch at hand is answered by chat requests.

The answers become one `ChatResult` per request, so cache keys and records stay
those of the chat requests: a verdict is the same record whichever path asked it,
and a cache written by either path serves the other. What a chat answer has per
request and a batch only in total, the usage, is split evenly over the batch's
requests (totals stay exact). A batch reports what it cost (`Batch`: usage over
every request it sent, follow-ups) with its answers; it writes no one else's
counters. Bench: bench/client.py; proof on the embedded vLLM server:
tests/core/test_embedded_e2e.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from tension.cache.records import Usage
from tension.core.errors import ConfigError, RefusedError, RetryBudgetError, StatusError
from tension.core.llm.answer_checks import misnumbered
from tension.core.llm.choices import EMPTY_ANSWER_RETRIES, answer_text
from tension.core.llm.client import ChatResult, Client, ShortAnswerError
from tension.core.llm.failures import RetryPolicy
from tension.core.llm.protocol import (
    ChatRequest,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    TemplateRequest,
    TokenIds,
    TokenizeRequest,
    usage_of,
)
from tension.core.llm.servers import Server
from tension.core.llm.ticket import NO_TICKET, Ticket
from tension.core.redact import redact_secrets

__all__ = ["Template", "Batch", "Batcher", "MODES", "SENTINEL"]

MODES = ("auto", "on", "off")
# A private-use character: no chat template or tokenizer gives it a meaning, so it
# marks where the user text goes in the rendered template.
SENTINEL = "\ue000"
_PROBE = RetryPolicy(attempts=2, total_seconds=30.0)  # a probe: a server that fails it gets chat requests
_TOKENS = msgspec.json.Decoder(TokenIds)
_TEXT = msgspec.json.Decoder(DetokenizeResponse)
_ANSWER = msgspec.json.Decoder(CompletionResponse)
T = TypeVar("T")


class Unbatchable(Exception):
    """Why a role's requests cannot travel as one completion request (`server`: the
    one that cannot, by name, when it is not the one asked first)."""

    def __init__(self, why: str, server: str | None = None):
        super().__init__(why)
        self.server = server


class _Fallback(Exception):
    """A batched answer that cannot be used (`why`), and what it cost: the rest
    of the run goes by chat requests (module docstring, 3)."""

    def __init__(self, why: str, usage: Usage):
        super().__init__(why)
        self.why = why
        self.usage = usage


class Template(msgspec.Struct, frozen=True):
    """The server's chat template around one user message, for one system message
    and template kwargs."""

    system: str
    prefix: str
    suffix: str

    def prompt(self, request: ChatRequest) -> str:
        return self.prefix + request.messages[-1]["content"] + self.suffix


class Batch(msgspec.Struct, kw_only=True):
    """The answers of one batch, one per request in order, and what the batch cost:
    the usage of every completion request sent for it and the follow-ups."""

    results: list[ChatResult]
    usage: Usage
    followups: int = 0


def _shape(request: ChatRequest) -> ChatRequest:
    """What the requests of one batch share: everything but the user text."""
    return msgspec.structs.replace(request, messages=[request.messages[0]])


def batchable(requests: Sequence[ChatRequest]) -> bool:
    """A system and a user message each, and nothing else that differs."""
    first = requests[0]
    if first.stream or first.n != 1:
        return False
    shape = _shape(first)
    return all(len(r.messages) == 2 and r.messages[0].get("role") == "system" and r.messages[1].get("role") == "user"
               and _shape(r) == shape for r in requests)


class Batcher:
    """One role's batched path: decided once (the first request renders and
    checks the template), then `complete` per batch. `mode` is --judge-batch."""

    def __init__(self, client: Client, mode: str, role: str, flag: str = "--judge-batch",
                 notice: Callable[[str], None] | None = None):
        if mode not in MODES:
            raise ValueError(f"mode: one of {', '.join(MODES)}, got {mode!r}")
        self.client = client
        self.mode = mode
        self.role = role
        self.flag = flag
        self.why_not: str | None = None if mode != "off" else f"{flag} off"
        self._templates: dict[tuple, Template] = {}
        self._lock = asyncio.Lock()
        self.notice = notice  # told once when `auto` falls back to chat requests, and why
        self.batches = 0  # completion requests sent
        self.prompts = 0  # requests they carried

    def figures(self) -> dict[str, Any]:
        """run.json's "judge_batch": the mode, whether batches were sent, and if not why."""
        return {"mode": self.mode, "batched": self.batches > 0, "why_not": self.why_not,
                "requests": self.batches, "prompts": self.prompts}

    async def template(self, front: Server, requests: Sequence[ChatRequest]) -> Template | None:
        """The template for `requests`, or None: send them as chat requests. `front`
        is the role's server, or a router the run started: then every server behind
        it is checked (module docstring, 2), each rendering on itself (a router need
        not pass /detokenize on)."""
        if self.why_not is not None or not batchable(requests):
            return None
        first = requests[0]
        key = (first.model, first.messages[0]["content"], msgspec.json.encode(first.chat_template_kwargs))
        if (t := self._templates.get(key)) is not None:
            return t
        async with self._lock:  # the first batch renders and checks; the others wait for its answer
            if self.why_not is not None:
                return None
            if (t := self._templates.get(key)) is None:
                servers = [self.client.server(w) for w in front.workers] or [front]
                lead = servers[0]
                try:
                    for server in servers if self.mode == "auto" else ():
                        if not await self._says_vllm(server, first.model):
                            # any other OpenAI-compatible server (its /v1/models owned_by): chat
                            # requests, as it expects, without probing it for vLLM's endpoints
                            self.why_not = f"the server {server.name} does not say it is vLLM (/v1/models owned_by)"
                            if server is not lead and self.notice is not None:  # mixed servers: the one named
                                self.notice(f"{self.role}: one chat request per prompt, since {self.why_not}, "
                                            f"unlike {lead.name} ({self.flag} auto)")
                            return None
                    t = await self._render(lead, first)
                    for server in servers[1:]:  # behind the router, any worker may get a batch
                        try:
                            other = await self._render(server, first)
                        except Unbatchable as e:
                            raise Unbatchable(str(e), server.name) from None
                        if other != t:
                            raise Unbatchable(f"its chat template renders differently from {lead.name}'s",
                                              server.name)
                except Unbatchable as e:
                    where = e.server or lead.name
                    if self.mode == "on":
                        raise ConfigError(f"{self.flag} on: the {self.role} server {where} cannot take batched "
                                          f"prompts: {e}; use {self.flag} auto or off") from None
                    self.why_not = str(e) if e.server is None else f"{where}: {e}"
                    if self.notice is not None:
                        self.notice(f"{self.role}: one chat request per prompt, since the server {where} cannot "
                                    f"take batched prompts: {e} ({self.flag} auto)")
                    return None
                self._templates[key] = t
        return t

    async def _says_vllm(self, server: Server, model: str) -> bool:
        await self.client.check_gate()  # the run's check lists every server's models
        if server.models is None:
            try:
                await self.client.models(server, retry=_PROBE)
            except (RefusedError, StatusError, RetryBudgetError):
                return False
        return server.is_vllm()

    async def _render(self, server: Server, request: ChatRequest) -> Template:
        model, system = request.model, request.messages[0]["content"]
        kwargs = request.chat_template_kwargs
        try:
            ids = await self._post(server, "/tokenize", TemplateRequest(
                model=model, messages=[{"role": "system", "content": system}, {"role": "user", "content": SENTINEL}],
                chat_template_kwargs=kwargs), _TOKENS, model)
            text = (await self._post(server, "/detokenize", DetokenizeRequest(model=model, tokens=ids.tokens),
                                     _TEXT, model)).prompt
            if text.count(SENTINEL) != 1:
                raise Unbatchable(f"its rendered chat template holds the user message {text.count(SENTINEL)} times")
            prefix, suffix = text.split(SENTINEL)
            template = Template(system=system, prefix=prefix, suffix=suffix)
            chat_ids = (await self._post(server, "/tokenize", TemplateRequest(
                model=model, messages=request.messages, chat_template_kwargs=kwargs), _TOKENS, model)).tokens
            text_ids = (await self._post(server, "/tokenize", TokenizeRequest(
                model=model, prompt=template.prompt(request)), _TOKENS, model)).tokens
        except (RefusedError, StatusError, RetryBudgetError) as e:
            # a probe that fails (even a passing fault) costs the run its batches, never a story
            raise Unbatchable(f"its chat template could not be rendered ({redact_secrets(str(e))[:200]})") from None
        if chat_ids != text_ids:
            at = next((i for i, (a, b) in enumerate(zip(chat_ids, text_ids)) if a != b), min(len(chat_ids),
                                                                                           len(text_ids)))
            raise Unbatchable(f"a prompt built from its rendered template differs from the chat prompt at token "
                              f"{at} of {len(chat_ids)}")
        return template

    async def _post(self, server: Server, path: str, body: msgspec.Struct, decoder: msgspec.json.Decoder[T],
                    model: str) -> T:
        return await self.client.post(server, path, body, decoder, model=model, retry=_PROBE)

    async def complete(self, server: Server, template: Template, requests: Sequence[ChatRequest],
                       ticket: Ticket = NO_TICKET) -> Batch:
        """One answer per request, from /v1/completions: as `Client.chat` would give
        them (never short; a prompt whose answer is empty asked again, a bounded
        number of times, as the chat path does)."""
        t0 = time.perf_counter()
        todo = list(range(len(requests)))
        out: list[ChatResult | None] = [None] * len(requests)
        empty = [0] * len(requests)
        spent = Usage()
        followups = 0
        attempts = self.client.retry.attempts
        for _ in range(attempts + 1):
            try:
                got, usage, model = await self._send(server, template, [requests[i] for i in todo], ticket)
            except _Fallback as e:
                spent.add(e.usage)
                self._give_up(e.why)
                followups += await self._by_chat(server, requests, todo, out, spent, ticket)
                break
            spent.add(usage)
            share = _split(usage, len(todo))
            again = []
            for i, choice, u in zip(todo, got, share):
                if choice is None or (not choice.text.strip() and empty[i] < EMPTY_ANSWER_RETRIES):
                    empty[i] += choice is not None
                    again.append(i)
                    continue
                lp = choice.first_token_logprobs() if requests[i].logprobs else None
                text = answer_text(server, choice.text, requests[i].max_tokens)
                out[i] = ChatResult(texts=[text], finish_reasons=[choice.finish_reason],
                                    model=model, usage=u, seconds=0.0,
                                    first_logprobs=[lp] if requests[i].logprobs else [])
            if not again:
                break
            followups += 1
            todo = again
        else:
            raise ShortAnswerError(f"{server.name}/v1/completions: {len(todo)} of {len(requests)} prompts "
                                   f"unanswered after {attempts} follow-up requests", spent, followups)
        seconds = time.perf_counter() - t0
        results = [res for res in out if res is not None]
        for res in results:
            res.seconds = seconds
        return Batch(results=results, usage=spent, followups=followups)

    def _give_up(self, why: str) -> None:
        """A batched answer could not be used: chat requests for the rest of the run,
        said once (`auto`), or the run stops (`on`)."""
        if self.mode == "on":
            raise ConfigError(f"{self.flag} on: {why}; use {self.flag} auto or off")
        if self.why_not is None:  # the first batch that met it says it; batches in flight follow quietly
            self.why_not = why
            if self.notice is not None:
                self.notice(f"{self.role}: one chat request per prompt from now on, since {why} ({self.flag} auto)")

    async def _by_chat(self, server: Server, requests: Sequence[ChatRequest], todo: list[int],
                       out: list[ChatResult | None], spent: Usage, ticket: Ticket) -> int:
        """The prompts `todo` of a batch whose answer could not be used, as chat
        requests (each checked as every chat answer is); their follow-ups."""
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(self.client.chat(server, requests[i], ticket)) for i in todo]
        followups = 0
        for i, task in zip(todo, tasks):
            res = out[i] = task.result()
            spent.add(res.usage)
            followups += res.followups
        return followups

    async def _lacking(self, server: Server, body: CompletionRequest) -> str:
        """Which server has no /v1/completions, after a 404 from `server`: behind the
        router, each worker asked with the request made small (its first prompt,
        one token), so the message names the worker, not the router's port."""
        small = msgspec.structs.replace(body, prompt=body.prompt[:1], max_tokens=1)
        lacking = []
        for worker in [self.client.server(w) for w in server.workers] or [server]:
            try:
                await self.client.post(worker, "/v1/completions", small, _ANSWER, model=body.model, retry=_PROBE)
            except RefusedError as e:
                if e.missing == "endpoint":
                    lacking.append(worker.name)
            except (StatusError, RetryBudgetError):
                pass
        who = ", ".join(lacking) or server.name
        return f"the {self.role} server {who} has no /v1/completions (HTTP 404)"

    async def _send(self, server: Server, template: Template, requests: list[ChatRequest], ticket: Ticket
                    ) -> tuple[list[CompletionChoice | None], Usage, str]:
        """One completion request; its choice per prompt (None where missing), usage
        and model. An answer that cannot be used raises `_Fallback`."""
        r = requests[0]
        body = CompletionRequest(model=r.model, prompt=[template.prompt(q) for q in requests], n=1,
                                 temperature=r.temperature, top_p=r.top_p, min_p=r.min_p, max_tokens=r.max_tokens,
                                 seed=r.seed, structured_outputs=r.structured_outputs,
                                 logprobs=(r.top_logprobs or 1) if r.logprobs else None, add_special_tokens=False,
                                 extra_body=r.extra_body)
        try:
            data = await self.client.post(server, "/v1/completions", body, _ANSWER, model=r.model, ticket=ticket)
        except RefusedError as e:
            if e.missing != "endpoint":
                raise
            # one worker behind the router lacks it (a vLLM server mixed with another): the
            # rest of the run by chat, never a stopped run naming the router's private port
            raise _Fallback(await self._lacking(server, body), Usage()) from None
        self.batches += 1
        self.prompts += len(requests)
        usage = usage_of(data.usage, len(requests))
        name = server.name
        if (why := misnumbered([ch.index for ch in data.choices], len(requests))) is not None:
            raise _Fallback(f"{name} numbered the choices of a batched answer wrongly ({why}; expected one per "
                            f"prompt, 0 … {len(requests) - 1})", usage)
        server.answered_by(r.model, data.model)
        choices: list[CompletionChoice | None] = [None] * len(requests)
        for ch in data.choices:
            choices[ch.index] = ch
        return choices, usage, data.model or r.model


def _split(total: Usage, k: int) -> list[Usage]:
    """`total` over k requests: one request each, tokens as even as integers allow
    (the first ones take the remainder), so the sum is `total` again."""
    def parts(x: int) -> list[int]:
        q, rem = divmod(x, k)
        return [q + (i < rem) for i in range(k)]

    return [Usage(requests=1, prompt_tokens=p, completion_tokens=c, cached_tokens=h, cached_unreported=u)
            for p, c, h, u in zip(parts(total.prompt_tokens), parts(total.completion_tokens),
                                  parts(total.cached_tokens), parts(total.cached_unreported))]

"""The OpenAI-compatible wire format, as msgspec Structs (only the fields we use;
unknown fields in answers are ignored)."""

from __future__ import annotations

import urllib.parse
from typing import Any

import msgspec

from tension.cache.records import Usage
from tension.core.llm.answer_checks import misnumbered

__all__ = [
    "body_bytes", "ChatRequest", "ChatResponse", "ChatChunk", "ChunkChoice", "Delta", "Choice", "ChoiceMessage",
    "WireUsage",
    "TokenizeRequest", "TokenizeResponse", "ContentTokenizeRequest", "CountTokenizeRequest", "ModelList", "ModelCard",
    "ModelMeta",
    "Props", "ErrorBody", "routing_headers", "salted",
    "TemplateRequest", "TokenIds", "DetokenizeRequest", "DetokenizeResponse", "CompletionRequest",
    "CompletionResponse", "CompletionChoice", "usage_of",
]


class ChatRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A /v1/chat/completions request. Fields left at None are not sent."""

    model: str
    messages: list[dict[str, str]]
    n: int  # always sent (and hashed), even when 1
    temperature: float | None = None
    top_p: float | None = None
    min_p: float | None = None  # vLLM's minimum-probability sampling (the generate pipeline's 0.1)
    max_tokens: int | None = None
    seed: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # vLLM's structured outputs, e.g. {"choice": ["Y", "N"]} for a constrained judge
    structured_outputs: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    # llama.cpp's own constraint forms, set only on the wire (core/llm/traits.py
    # `grammar_of`) in place of structured_outputs; never in a cache key.
    grammar: str | None = None
    response_format: dict[str, Any] | None = None
    # Streaming (`tension-run bench` measures time to first token). Left at None
    # by score, so its request bytes and cache keys are unchanged.
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    # Fields of the user's own for the body's top level (`--extra-body`: a server's own
    # switch, e.g. transformers serve's generation_config), merged in on the wire
    # (`body_bytes`); part of the cache key, since they may change the answer.
    extra_body: dict[str, Any] | None = None

    def key_fields(self) -> dict[str, Any]:
        """Everything that decides the answer: the cache key hashes exactly this."""
        return msgspec.to_builtins(self)


class ChoiceMessage(msgspec.Struct):
    content: str | None = None
    role: str | None = None


class TopLogprob(msgspec.Struct):
    token: str
    logprob: float


class TokenLogprob(msgspec.Struct):
    token: str
    logprob: float
    top_logprobs: list[TopLogprob] = []


class ChoiceLogprobs(msgspec.Struct):
    content: list[TokenLogprob] | None = None


class Choice(msgspec.Struct):
    message: ChoiceMessage
    index: int = -1  # not sent: `ChatResponse` numbers such choices in the order they came
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None

    def first_token_logprobs(self) -> dict[str, float] | None:
        """Top log-probabilities of the first generated token, or None."""
        if self.logprobs is None or not self.logprobs.content:
            return None
        first = self.logprobs.content[0]
        out = {t.token: t.logprob for t in first.top_logprobs}
        out.setdefault(first.token, first.logprob)
        return out


class PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class WireUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: PromptDetails | None = None

    def usage(self, requests: int = 1) -> Usage:
        """The one reading of a server's usage: what `requests` requests used. No
        ``prompt_tokens_details.cached_tokens`` (transformers serve, FastChat, llama.cpp)
        is "not reported", never "0 cached" (`Usage.cached_unreported`)."""
        details = self.prompt_tokens_details
        cached = details.cached_tokens if details is not None else None
        return Usage(requests=requests, prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                     cached_tokens=cached or 0, cached_unreported=requests if cached is None else 0)


def usage_of(wire: WireUsage | None, requests: int = 1) -> Usage:
    """`wire.usage(requests)`, or only the request count when the server sent none
    (which reports no cached prompt tokens either)."""
    return wire.usage(requests) if wire is not None else Usage(requests=requests, cached_unreported=requests)


class ChatResponse(msgspec.Struct):
    choices: list[Choice]
    model: str = ""
    usage: WireUsage | None = None

    def __post_init__(self) -> None:
        # Choices placed by a wrong index would scramble endings (core/llm/answer_checks.py):
        # raised while decoding, it makes the answer unreadable, retried as any other.
        # Choices that carry no index at all are numbered in the order sent, as before.
        if all(c.index == -1 for c in self.choices):
            for i, c in enumerate(self.choices):
                c.index = i
        if (why := misnumbered([c.index for c in self.choices])) is not None:
            raise ValueError(why)


class Delta(msgspec.Struct, frozen=True):
    content: str | None = None


class ChunkChoice(msgspec.Struct):
    delta: Delta = Delta()
    index: int = 0
    finish_reason: str | None = None


class ChatChunk(msgspec.Struct):
    """One server-sent event of a streamed chat completion; with
    ``stream_options: {"include_usage": true}`` the last one carries the usage."""

    choices: list[ChunkChoice] = []
    model: str = ""
    usage: WireUsage | None = None


class TokenizeRequest(msgspec.Struct, kw_only=True):
    model: str
    prompt: str
    add_special_tokens: bool = False


class TokenizeResponse(msgspec.Struct):
    """vLLM's answer (`count`); a server of another dialect may answer 200 with only
    `tokens` (llama.cpp's `{"tokens": []}` to a body without `content`)."""

    count: int | None = None
    max_model_len: int | None = None  # vLLM reports the served context length here
    tokens: list[Any] | None = None


class CountTokenizeRequest(msgspec.Struct, kw_only=True):
    """llama-cpp-python's /extras/tokenize/count: `input` in, `{"count": N}` out."""

    input: str


class ContentTokenizeRequest(msgspec.Struct, kw_only=True):
    """llama.cpp's /tokenize: `content` in, `{"tokens": [...]}` out."""

    content: str
    add_special: bool = False


# -- the judge's batched path (core/llm/batch.py): vLLM's chat template rendered
# once through /tokenize and /detokenize, then many prompts in one /v1/completions


class TemplateRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """/tokenize with messages: the token ids of the prompt the chat endpoint builds."""

    model: str
    messages: list[dict[str, str]]
    add_generation_prompt: bool = True
    add_special_tokens: bool = False  # the chat endpoint's default
    chat_template_kwargs: dict[str, Any] | None = None


class TokenIds(msgspec.Struct):
    tokens: list[int]


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    model: str
    tokens: list[int]


class DetokenizeResponse(msgspec.Struct):
    prompt: str


class CompletionRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A /v1/completions request with one prompt per judged ending (`n` choices
    each). The prompts are already templated, so no special token is added."""

    model: str
    prompt: list[str]
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    min_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    structured_outputs: dict[str, Any] | None = None
    logprobs: int | None = None  # top-k of each token (the chat API's top_logprobs)
    # vLLM's default is True; the templated prompt already holds the special tokens, so
    # the batch sends False (a default here would be left out of the body: omit_defaults)
    add_special_tokens: bool = True
    extra_body: dict[str, Any] | None = None  # as ChatRequest's: merged in on the wire (`body_bytes`)


class CompletionLogprobs(msgspec.Struct):
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float] | None] = []


class CompletionChoice(msgspec.Struct):
    text: str = ""
    index: int = 0
    finish_reason: str | None = None
    logprobs: CompletionLogprobs | None = None

    def first_token_logprobs(self) -> dict[str, float] | None:
        """Top log-probabilities of the first generated token (as `Choice`'s), or None."""
        lp = self.logprobs
        if lp is None or not lp.tokens:
            return None
        out = dict(lp.top_logprobs[0] or {}) if lp.top_logprobs else {}
        if lp.token_logprobs and lp.token_logprobs[0] is not None:
            out.setdefault(lp.tokens[0], lp.token_logprobs[0])
        return out


class CompletionResponse(msgspec.Struct):
    choices: list[CompletionChoice]
    model: str = ""
    usage: WireUsage | None = None


class ModelMeta(msgspec.Struct):
    n_ctx: int | None = None  # llama.cpp: the context of one slot


class ModelCard(msgspec.Struct):
    id: str
    owned_by: str | None = None  # "vllm" on a vLLM server, "llamacpp" on llama.cpp's
    max_model_len: int | None = None  # vLLM
    meta: ModelMeta | None = None  # llama.cpp


class Props(msgspec.Struct):
    """llama.cpp's GET /props, the fields used."""

    total_slots: int | None = None


class ModelList(msgspec.Struct):
    data: list[ModelCard]


class ErrorDetail(msgspec.Struct):
    message: str = ""


class ErrorBody(msgspec.Struct):
    """An error answer: OpenAI/vLLM ``{"error": {"message"}}``, vLLM's 401
    ``{"error": "Unauthorized"}``, older vLLM's flat ``{"message"}``, or FastAPI's
    ``{"detail": "Not Found"}`` for a path the server does not have."""

    error: ErrorDetail | str | None = None
    message: str | None = None
    detail: Any = None


def routing_headers(key: str) -> dict[str, str] | None:
    """The routing key of a request as the vLLM router reads it: requests with one
    `X-Session-ID` go to one worker under its sticky or consistent-hash policies (the
    story for generation and /tokenize, the story and position for the judge:
    requests that share a prompt prefix). A plain server ignores the header.
    Non-ASCII ids are percent-encoded (a header value is Latin-1)."""
    if not key:
        return None
    return {"X-Session-ID": key if key.isascii() and key.isprintable() else urllib.parse.quote(key, safe="")}


def salted(headers: dict[str, str] | None, attempt: int) -> dict[str, str] | None:
    """`headers` with the routing key made new for a retry: a sticky router sends
    the same key to the same worker, which has just sent an unreadable answer."""
    if not headers or "X-Session-ID" not in headers:
        return headers
    return {**headers, "X-Session-ID": f"{headers['X-Session-ID']}~retry{attempt + 1}"}


def body_bytes(enc: msgspec.json.Encoder, body: msgspec.Struct) -> bytes:
    """`body` as sent: its fields, and its `extra_body` (if it has one) merged in at the
    top level, as the OpenAI client's `extra_body` is (the settings refuse extra
    fields that the tool sets itself, so no key is sent twice)."""
    extra = getattr(body, "extra_body", None)
    if not extra:
        return enc.encode(body)
    own = enc.encode(msgspec.structs.replace(body, extra_body=None))
    return own[:-1] + b"," + enc.encode(extra)[1:]

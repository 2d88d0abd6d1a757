"""What a server refuses or drops of a request, learned from its answers, said once
(issue 61 M2, M3: transformers serve answers 422 "Unexpected fields in the request:
{'min_p'}" to every field outside OpenAI's, and both it and FastChat drop `logprobs`).

A field refused is refused for every request like this one: the run cannot go on
with it, and sending it again cannot help. So it is a `RefusedError` (exit 2: the
settings must change), naming the field and the flag that leaves it out, rather
than a story failing at each position with the server's words alone. A field
dropped is worse: the answers come back, without what was asked (no
log-probabilities for `--judge-constraint logprobs`, whose every verdict would read
as "empty" and every no-rate as 1.0). It is refused too, at the first answer. Each
is kept on the server's record (`Server.refuses`, `Server.drops`: run.json
`servers`) and said once.

A fallback that keeps the meaning needs the request to be built otherwise (and
keyed otherwise: the cache key is the request as built), which is the pipeline's
(core/pipelines/unconstrained.py: vLLM's `structured_outputs` refused, the judge and
the readers go unconstrained, as the papers' did): the error is a
`FieldRefusedError`, naming the fields, for it to tell; its advice names the flag
that leaves them out where the pipeline has no fallback.
"""

from __future__ import annotations

import re

from tension.core.errors import RefusedError, StatusError
from tension.core.llm.protocol import ChatRequest, ChatResponse
from tension.core.llm.servers import Server

__all__ = ["FieldRefusedError", "refused_fields", "field_refusal", "dropped_logprobs", "logprobs_dropped",
           "FIELD_ADVICE"]

# The wordings of "this field is not allowed" seen or documented: transformers serve's
# "Unexpected fields in the request: {...}", pydantic's "Extra inputs are not permitted",
# OpenAI's "Unrecognized request argument supplied: x", and the generic forms.
_UNEXPECTED = re.compile(r"unexpected (?:fields?|keyword|argument|parameter)|extra (?:inputs|fields) (?:are )?not "
                         r"permitted|unrecogni[sz]ed (?:request )?(?:argument|field|parameter)|unknown "
                         r"(?:fields?|parameter|argument)|not (?:a )?supported (?:field|parameter)", re.IGNORECASE)
# Fields every OpenAI-compatible server takes: never the one refused.
_OPENAI = frozenset({"model", "messages", "n", "temperature", "top_p", "max_tokens", "seed", "stream", "prompt"})

FIELD_ADVICE = {
    # no fallback: without it the stories are sampled otherwise than the papers' (min_p 0.1, generate's
    # default), so leaving it out is the user's choice, recorded in each story's settings
    "min_p": "--min-p 0 leaves it out (the stories are then sampled without the papers' min_p 0.1, generate's "
             "default; each story's settings record it)",
    "structured_outputs": "--judge-constraint none (score) or --reader-constraint none (fairplay) leaves it out: "
                          "free answers, parsed as the paper parses them",
    "grammar": "--judge-constraint none (score) or --reader-constraint none (fairplay) leaves it out",
    "response_format": "--judge-constraint none (score) or --reader-constraint none (fairplay) leaves it out",
    "chat_template_kwargs": "--no-reasoning-off leaves it out (then the model must not reason, or its answers "
                            "open with its reasoning)",
    "logprobs": "--judge-constraint none (or choice) leaves it out",
    "top_logprobs": "--judge-constraint none (or choice) leaves it out",
    "stream_options": "bench --no-stream leaves it out",
}


class FieldRefusedError(RefusedError):
    """A server refuses (`dropped` False: a 4xx naming them) or drops (True: answers
    without what they ask for) `fields` of every request like this one."""

    def __init__(self, status: int, url: str, body: str, advice: str, server: str, fields: list[str],
                 dropped: bool = False):
        super().__init__(status, url, body, "field", advice)
        self.server = server  # its name, as messages give it
        self.fields = fields
        self.dropped = dropped


def refused_fields(e: StatusError, request: ChatRequest) -> list[str]:
    """The fields of `request` that the 4xx `e` says the server does not take (none:
    another refusal). Only a field the request sends is named, so a message quoting
    a whole schema names nothing it was not sent."""
    if e.status not in (400, 422) or not _UNEXPECTED.search(e.body):
        return []
    sent = [f for f, v in request.key_fields().items() if v is not None and f not in _OPENAI]
    sent = [f for f in sent if f != "extra_body"] + list(request.extra_body or {})
    return [f for f in sent if re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", e.body)]


def field_refusal(server: Server, fields: list[str], e: StatusError) -> FieldRefusedError:
    """The run's error for fields `server` refuses (module docstring); kept on its record, said once."""
    server.refuses_fields(fields)
    ways = "; ".join(f"{f}: {FIELD_ADVICE.get(f, 'leave it out of --extra-body')}" for f in fields)
    return FieldRefusedError(e.status, e.url, e.body,
                             f"{server.name} does not take the field{'s' if len(fields) > 1 else ''} "
                             f"{', '.join(fields)}, which the tool sends for the settings given; {ways}",
                             server.name, fields)


def dropped_logprobs(server: Server, request: ChatRequest, data: ChatResponse) -> FieldRefusedError | None:
    """The run's error when `request` asked for log-probabilities and the answer's
    every choice came without them (a server that drops `logprobs`): None otherwise."""
    if not request.logprobs or not data.choices or any(c.logprobs is not None for c in data.choices):
        return None
    return logprobs_dropped(server)


def logprobs_dropped(server: Server) -> FieldRefusedError:
    """The run's error for a server that answered without the log-probabilities asked
    for (a plain answer's every choice, or a stream's every event: core/llm/stream.py)."""
    server.drops_field("logprobs")
    return FieldRefusedError(200, server.name + "/v1/chat/completions", "",
                             f"{server.name} returned no log-probabilities although they were asked for (it "
                             "ignores `logprobs`): --judge-constraint logprobs reads Y or N from them, and without "
                             "them every verdict would be empty and every no-rate 1.0; use --judge-constraint none "
                             "(the paper's free answers) or choice", server.name, ["logprobs"], dropped=True)

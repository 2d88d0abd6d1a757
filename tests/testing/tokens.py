"""The test tokenizer (`tokenize`, `count_tokens`: words and single punctuation
marks) and the fake server's routes that use it (`TokenRoutes`, mixed into
`AnswerModel`): /tokenize, /detokenize and llama-cpp-python's token counter. With
`batching`, the ids are a vocabulary the server grows as it meets pieces of text,
so /detokenize turns them back into the text."""

from __future__ import annotations

import functools
import re
import threading
import zlib

from .messages import check_messages, content_text, render_template
from .validation import BadRequest, check_model, is_int

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """The test tokenizer: words and single punctuation marks, e.g. "Hi, you." → 4."""
    return _TOKEN_RE.findall(text)


def _char_class(ch: str) -> str:
    """A stand-in ASCII character of `ch`'s class: "a" word, " " space, "." other."""
    return "a" if _WORD_RE.match(ch) else (" " if _SPACE_RE.match(ch) else ".")


_WORD_RE = re.compile(r"\w")
_SPACE_RE = re.compile(r"\s")
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]")
# ASCII byte -> b"w" (word char), b" " (space) or b"p" (token of its own), as the regex sees it
_CLASS_TABLE = bytes({"a": 119, " ": 32, ".": 112}[_char_class(chr(i))] for i in range(128)) + bytes(128)


@functools.lru_cache(maxsize=8192)
def count_tokens(text: str) -> int:
    """Number of tokens of `text` under the test tokenizer: len(`tokenize`(text)).

    Computed without building the token list (a word run counts once, every other
    non-space character once), several times faster than the regex on long prompts.
    Remembered for the last texts counted: a test sends the same prompts again and
    again (its runs share a corpus; every request carries the same system prompt).
    """
    if not text.isascii():
        chars = set(_NON_ASCII_RE.findall(text))
        if len(chars) > 64:
            return len(_TOKEN_RE.findall(text))
        for ch in chars:
            text = text.replace(ch, _char_class(ch))
    classes = text.encode("ascii").translate(_CLASS_TABLE)
    runs = classes.replace(b"p", b" ")
    return classes.count(b"p") + runs.count(b" w") + runs.startswith(b"w")


@functools.lru_cache(maxsize=1 << 16)
def count_answer(text: str | None) -> int:  # answers come from a small set of strings
    return len(_TOKEN_RE.findall(text or ""))


def _token_id(tok: str) -> int:
    return zlib.crc32(tok.encode()) % 50_000


@functools.lru_cache(maxsize=1024)
def tokens_of(text: str) -> tuple[int, ...]:
    """The test tokenizer's ids of `text` (`tokenize`, `_token_id`), remembered as
    `count_tokens` is: a run asks for the same prefixes' tokens as the run before."""
    return tuple(_token_id(t) for t in tokenize(text))


# a piece of text as the reversible tokenizer cuts it: a token with the spaces before
# it, or the spaces that end the text; the pieces joined are the text again
_PIECE_RE = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")


class TokenRoutes:
    """The token routes' makers and the vocabulary behind /detokenize; the door's
    `AnswerModel` holds the settings they read (`dialect`, `batching`,
    `max_model_len`, `template_quirk`) and the lock."""

    models: tuple[str, ...]
    dialect: str
    batching: bool
    max_model_len: int
    template_quirk: str | None
    _lock: threading.Lock

    def _init_vocabulary(self) -> None:
        self._vocab: dict[str, int] = {}  # piece -> token id (see _PIECE_RE)
        self._pieces: list[str] = []

    def _token_ids(self, text: str) -> list[int]:
        """Reversible ids of `text`'s pieces (`_PIECE_RE`), from the server's vocabulary."""
        out = []
        with self._lock:
            for piece in _PIECE_RE.findall(text):
                tid = self._vocab.get(piece)
                if tid is None:
                    tid = self._vocab[piece] = len(self._pieces)
                    self._pieces.append(piece)
                out.append(tid)
        return out

    def _detokenize_payload(self, body: dict) -> dict:
        check_model(body, self.models)
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(is_int(t) for t in ids):
            raise BadRequest(400, "tokens: expected a list of integers", "BadRequestError", "tokens")
        with self._lock:
            if any(not 0 <= t < len(self._pieces) for t in ids):
                raise BadRequest(400, "tokens: an id outside the vocabulary", "BadRequestError", "tokens")
            return {"prompt": "".join(self._pieces[t] for t in ids)}

    def _count_payload(self, body: dict) -> dict:
        """llama-cpp-python's POST /extras/tokenize/count: ``{"input": text}`` →
        ``{"count": N}`` (its own tokenizer's count; here `count_tokens`)."""
        text = body.get("input")
        if not isinstance(text, str):
            raise BadRequest(422, "input: field required", "ValidationError", "input")
        return {"count": count_tokens(text)}

    def _tokenize_payload(self, body: dict) -> dict:
        if self.dialect == "llamacpp":  # reads `content` only, and no model
            content = body.get("content")
            return {"tokens": list(tokens_of(content)) if isinstance(content, str) else []}
        check_model(body, self.models)
        if "prompt" in body:
            prompt = body["prompt"]
            if not isinstance(prompt, str):
                raise BadRequest(400, f"prompt: expected a string, got {type(prompt).__name__}",
                                 "BadRequestError", "prompt")
            if self.batching:  # the count is the test tokenizer's, the ids the vocabulary's pieces
                return {"count": count_tokens(prompt), "max_model_len": self.max_model_len,
                        "tokens": self._token_ids(prompt)}
            tokens = list(tokens_of(prompt))
        elif "messages" in body:
            msgs = check_messages(body.get("messages"))
            if self.batching:  # the prompt the chat endpoint would build, as vLLM's /tokenize gives it
                ids = self._token_ids(render_template(msgs, body.get("add_generation_prompt", True) is not False,
                                                      body.get("chat_template_kwargs"), self.template_quirk))
                return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}
            tokens = [t for m in msgs for t in tokens_of(content_text(m.get("content")))]
        else:
            raise BadRequest(400, "expected `prompt` or `messages`", "BadRequestError", "prompt")
        return {"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens}

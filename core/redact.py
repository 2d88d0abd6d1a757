"""The one redactor: what a server sends that we print or store passes here first.

A server (or a proxy in front of it) may echo the request's ``Authorization``
header in an error body — "invalid credentials: Bearer sk-…" — and aiohttp puts a
URL's ``user:password@`` into its messages. Whatever of that reaches an error
message, stderr, a run record or the cache goes through `redact`:

- every secret registered with `register` (the run's API key), wherever it stands;
- the credential after ``Bearer`` / ``Basic`` (a header echoed with a key we never
  registered, e.g. another tool's);
- the password of a URL (``http://user:secret@host`` → ``http://user:***@host``).

Answer texts (endings, verdicts) pass `redact_secrets`, which removes only the
registered secrets: "the bearer of bad news" in a story is a story, not a header.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "register", "redact", "redact_secrets"]

MASK = "***"
MIN_SECRET = 4  # shorter "keys" (test stubs, "x") would mask ordinary text
_secrets: set[str] = set()
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}")
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")


def register(secret: str | None) -> None:
    """Remember `secret` (an API key) so that `redact` removes it from now on."""
    if secret and len(secret) >= MIN_SECRET:
        _secrets.add(secret)


def redact_secrets(text: str) -> str:
    """`text` without any registered secret."""
    for s in _secrets:
        if s in text:
            text = text.replace(s, MASK)
    return text


def redact(text: str) -> str:
    """`text` without registered secrets, header credentials or URL passwords."""
    text = redact_secrets(text)
    text = _CREDENTIAL.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    return _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + "@", text)

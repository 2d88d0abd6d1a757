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
A secret is found in the forms a server's echo gives it too: in any letter case,
and with ``/``, ``+`` and ``=`` JSON-escaped (``\\u002f``, ``\\/``) or URL-encoded
(``%2F``), as a proxy that lower-cases or re-encodes the header sends it back.

A command line (run.json `argv`, the "Resume with the same command" line) passes
`redact_argv`: the above for each word, and the value of any option named like a
secret (``--api-key X``, ``--token=X``).
"""

from __future__ import annotations

import re

__all__ = ["MASK", "register", "redact", "redact_secrets", "redact_argv"]

MASK = "***"
MIN_SECRET = 4  # shorter "keys" (test stubs, "x") would mask ordinary text
_secrets: set[str] = set()
_found: re.Pattern[str] | None = None  # every registered secret, in each of its echoed forms
# the forms a character of a key takes in an echo that re-encodes it
_FORMS = {"/": r"(?:/|\\/|\\u002f|%2f)", "+": r"(?:\+|\\u002b|%2b)", "=": r"(?:=|\\u003d|%3d)"}
# an option whose value is a secret; --api-key-env names a variable, not a key
_SECRET_OPTION = re.compile(r"(?i)^--?[a-z0-9_-]*(key|token|password|passwd|secret|credential)$")
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}")
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")


def register(secret: str | None) -> None:
    """Remember `secret` (an API key) so that `redact` removes it from now on."""
    global _found
    if secret and len(secret) >= MIN_SECRET and secret not in _secrets:
        _secrets.add(secret)
        # longest first: a key that holds another is masked whole
        forms = ("".join(_FORMS.get(c, re.escape(c)) for c in s) for s in sorted(_secrets, key=len, reverse=True))
        _found = re.compile("|".join(forms), re.IGNORECASE)


def redact_secrets(text: str) -> str:
    """`text` without any registered secret, in any of its echoed forms."""
    return _found.sub(MASK, text) if _found is not None else text


def redact_argv(argv: list[str]) -> list[str]:
    """A command line as it may be printed or stored: each word redacted, and the
    value of an option named like a secret masked."""
    out: list[str] = []
    hide = False
    for word in argv:
        name, eq, _ = word.partition("=")
        if hide:
            out.append(MASK)
            hide = False
        elif word.startswith("-") and _SECRET_OPTION.match(name):
            out.append(f"{name}={MASK}" if eq else word)
            hide = not eq
        else:
            out.append(redact(word))
    return out


def redact(text: str) -> str:
    """`text` without registered secrets, header credentials or URL passwords."""
    text = redact_secrets(text)
    text = _CREDENTIAL.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    return _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + "@", text)

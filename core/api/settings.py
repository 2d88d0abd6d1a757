"""The keyword arguments of the API verbs as settings: each name a field of the
verb's settings Struct (a config file's key), its value checked against the
field's type, then defaults < fallback < ``config=`` TOML file < keywords, as the
CLI loads flags; and the server a verb talks to when none is named."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from tension.core.api.calls import called_by_the_cli
from tension.core.errors import ConfigError

if TYPE_CHECKING:  # only to type: the embedded server's module is imported when a server is looked for
    from tension.core.serving.embedded import ServerState

__all__ = ["check_keywords", "load", "embedded_fallback", "unnamed_server", "server_fallback", "check_out_folder",
           "count_arg", "kernel_settings"]

S = TypeVar("S", bound=msgspec.Struct)
K = TypeVar("K", bound=msgspec.Struct)


def check_keywords(verb: str, structs: tuple[type[msgspec.Struct], ...], values: dict[str, Any]) -> None:
    """A ConfigError naming the keyword for one no struct has, or whose value is not
    of its field's type. Bounds are the settings' own check (`check_declared`),
    whose message names the setting as well."""
    from tension.core.config.settings import fields_of

    fields = {f.name: f for s in structs for f in fields_of(s)}
    for name, value in values.items():
        if name not in fields:
            raise ConfigError(f"{verb}(): unknown keyword `{name}` (known: {', '.join(sorted(fields))})")
        if value is None:
            continue  # None: not given, the default (as a flag not given)
        if isinstance(value, os.PathLike):  # a Path where a path is wanted, as `corpus` and `out` take one
            value = values[name] = os.fspath(value)
        try:
            msgspec.convert(value, fields[name].type)
        except msgspec.ValidationError as e:
            raise ConfigError(f"{verb}(): keyword `{name}`: {e}") from None


def check_out_folder(value: str | os.PathLike, cache: str | os.PathLike | None = None, flag: str = "out") -> None:
    """A run's output folder as every verb takes it (the API's `out`, the CLI's
    --out), checked before any work: an existing file there is a ConfigError, and
    so is the cache folder `cache` (a verb that opens one) or a folder inside it,
    where the outputs would lie among the LMDB files."""
    out = os.fspath(value)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"--{flag} {out}: exists and is not a folder")
    if cache is None:
        return
    c = os.path.realpath(os.path.expanduser(os.fspath(cache)))
    o = os.path.realpath(os.path.expanduser(out))
    if o == c or o.startswith(c.rstrip(os.sep) + os.sep):
        where = "is" if o == c else "is inside"
        raise ConfigError(f"--{flag} {out}: {where} the cache folder {os.fspath(cache)}: the outputs would lie among "
                          "the LMDB files (and removing the run folder would remove the cache); give another --out")


def load(verb: str, struct: type[S], config: str | os.PathLike | None, values: dict[str, Any],
         fallback: dict[str, Any] | None = None, table: str | None = None) -> S:
    """The settings of a verb: its keywords checked, then loaded like flags."""
    from tension.core.config import load_settings

    check_keywords(verb, (struct,), values)
    return load_settings(struct, config, values, fallback, table)


def named_server(config: str | os.PathLike | None, values: dict[str, Any], key: str = "base_url") -> bool:
    """Whether the keywords or the config file name a server."""
    from tension.core.config import config_file_keys

    return values.get(key) is not None or "base_url" in config_file_keys(config)


def embedded_fallback() -> dict:
    """With no server named, the server `unnamed_server` finds; a running embedded
    server (`tension-run serve --embedded`) with its model and the embedded
    profile's settings."""
    from tension.core.serving.profiles import EMBEDDED_SCORE_SETTINGS

    url, st = unnamed_server("with the embedded profile settings")
    if st is None:
        return {} if url is None else {"base_url": url}
    return {**EMBEDDED_SCORE_SETTINGS, "base_url": st.url, "model": st.model}


def server_fallback() -> dict:
    """generate's fallback: the server `unnamed_server` finds, without a profile."""
    url, st = unnamed_server()
    return {"base_url": st.url, "model": st.model} if st is not None else {"base_url": url} if url else {}


def unnamed_server(embedded_note: str = "") -> tuple[str | None, ServerState | None]:
    """The server when no base URL is named, said on stderr: (OPENAI_BASE_URL's
    URL, None); else (None, the running embedded server's state); else (None, None)
    for the settings' default URL."""
    from tension.core.config.settings import BASE_URL_ENV, DEFAULT_BASE_URL, env_base_url
    from tension.core.redact import redact
    from tension.core.serving.embedded import running_state

    if (url := env_base_url()) is not None:
        print(f"using the server {BASE_URL_ENV} names, {redact(url)}; pass --base-url to use another",
              file=sys.stderr)
        return url, None
    if (st := running_state()) is not None:
        print(f"using the embedded server at {st.url} (model {st.model})" + (f" {embedded_note}" if embedded_note
              else "") + "; pass --base-url to use another server", file=sys.stderr)
        return None, st
    print(f"no server named (--base-url, {BASE_URL_ENV}, a running embedded server): using {DEFAULT_BASE_URL}",
          file=sys.stderr)
    return None, None


def count_arg(verb: str, name: str, v: Any, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (hi is not None and v > hi):
        what = f"an integer in [0, {hi}]" if hi is not None else "an integer >= 0"
        raise ConfigError(f"{verb}(): keyword `{name}`: expected {what}, got {v!r}")
    return v


def kernel_settings(verb: str, struct: type[K], values: dict[str, Any]) -> K:
    """A kernel settings Struct from keywords; a value its checks refuse is a
    ConfigError naming the keyword (``metrics(): keyword `window`: …``), or the
    flag when the CLI called (``--window: …``)."""
    from tension.core.config import build_settings

    if called_by_the_cli():
        return build_settings(struct, "--", **values)
    try:
        return struct(**values)
    except ValueError as e:
        field, _, rest = str(e).partition(": ")
        raise ConfigError(f"{verb}(): keyword `{field}`: {rest}") from None

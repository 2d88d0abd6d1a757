"""What every settings Struct shares: the field metadata the CLI builds its flags
from, the one loader (defaults < fallback < TOML file < flags), the value check,
the API key and the record of the settings without it."""

from __future__ import annotations

import functools
import os
import re
import tomllib
import typing
import unicodedata
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

import msgspec

from tension.core.errors import ConfigError
from tension.core.redact import redact
from tension.kernels.settings import Bounds, check_bounds

__all__ = ["API_KEY_ENV", "BASE_URL_ENV", "DEFAULT_BASE_URL", "env_base_url", "Settings", "flag", "public",
           "load_settings", "read_config_file", "config_file_keys", "build_settings", "SERVERS", "CONCURRENCY",
           "OUTPUTS", "fields_of", "ApiKey", "ReasoningOff",
           "EXTRA_BODY_HELP", "extra_body", "Timeout", "Retries", "RetrySeconds", "CachePath",
           "CacheMaxGB", "Progress", "Bounds", "TEMPERATURE", "TOKENS", "cache_file_given", "checked_key"]

API_KEY_ENV = "OPENAI_API_KEY"
# The server when none is named (--base-url, a config file's base_url): this
# variable, as the openai SDK reads it (a trailing /v1 is dropped), else a running
# embedded server, else DEFAULT_BASE_URL; the CLI says which on stderr.
BASE_URL_ENV = "OPENAI_BASE_URL"
DEFAULT_BASE_URL = "http://127.0.0.1:8000"

S = TypeVar("S", bound=msgspec.Struct)


@functools.cache
def fields_of(struct: type[msgspec.Struct]) -> tuple[msgspec.structs.FieldInfo, ...]:
    """`msgspec.structs.fields(struct)`, worked out once per Struct: it evaluates the
    string annotations (``from __future__ import annotations``) on every call, ≈ 3 ms for
    ScoreConfig, and every API call and config file checks its keywords against them."""
    return msgspec.structs.fields(struct)


def flag(description: str, group: str | None = None, **extra: Any) -> msgspec.Meta:
    """A field's metadata: its help text and, for a field that is a flag, the help
    group it is listed under. ``extra`` may name the flag when it differs from the
    field (``flag="reader-seed"``), its ``aliases``, its ``metavar`` and, for a number,
    its ``bounds`` (kernels.settings.Bounds; `Settings.check_declared`). Without a
    group the field is a config key only (cli.flags.CONFIG_ONLY says why). A Meta
    with only a description and extra adds no constraint: decoding is unchanged."""
    if group is not None:
        extra = {"group": group, **extra}
    return msgspec.Meta(description=description, extra=extra or None)


# flag groups of --help that every verb talking to servers has
SERVERS = "servers"
CONCURRENCY = "concurrency and reliability"
OUTPUTS = "storage and outputs"

# The fields those verbs share, as types: one help text for each on every verb.
ApiKey = Annotated[str | None, flag(f"API key; the {API_KEY_ENV} environment variable wins")]
ReasoningOff = Annotated[bool, flag("send chat_template_kwargs {enable_thinking: false}", SERVERS)]
EXTRA_BODY_HELP = ("a JSON object of fields added to the body of every {what} request: a server's own switch "
                   "the tool does not set, e.g. transformers serve's '{{\"generation_config\": \"{{\\\"do_sample\\\": "
                   "true}}\"}}' (docs/servers.md); part of the cache keys (default: none)")
# Fields the tool sets itself: an extra body naming one would send it twice (the flag that sets it instead).
OWN_BODY_FIELDS = {"model": "--model", "messages": "the prompts", "n": "--endings", "temperature": "--temperature",
                   "top_p": "--top-p", "min_p": "--min-p", "max_tokens": "--max-tokens", "seed": "--seed",
                   "chat_template_kwargs": "--reasoning-off", "structured_outputs": "--judge-constraint",
                   "logprobs": "--judge-constraint logprobs", "top_logprobs": "--judge-constraint logprobs",
                   "stream": "bench --no-stream", "stream_options": "bench", "prompt": "the prompts"}


def extra_body(text: str | None, field: str) -> dict[str, Any] | None:
    """The object `text` (a `--extra-body` value) holds, or None; a ConfigError names
    `field` for text that is no JSON object or that sets a field the tool sets."""
    if text is None or not text.strip():
        return None
    try:
        value = msgspec.json.decode(text.encode())
    except msgspec.DecodeError as e:
        raise ConfigError(f"{field}: expected a JSON object, e.g. '{{\"key\": true}}'; got {text!r} ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{field}: expected a JSON object, e.g. '{{\"key\": true}}'; got {text!r}")
    own = sorted(set(value) & set(OWN_BODY_FIELDS))
    if own:
        raise ConfigError(f"{field}: {', '.join(own)} is set by the tool itself; use "
                          + ", ".join(OWN_BODY_FIELDS[k] for k in own) + " instead")
    return value
Timeout = Annotated[float, flag("seconds allowed for one request", CONCURRENCY, bounds=Bounds(gt=0))]
Retries = Annotated[int, flag("attempts per request, the first included (429, 5xx, dropped connections)",
                              CONCURRENCY, bounds=Bounds(ge=1))]
RetrySeconds = Annotated[float, flag("give a request up after retrying this long", CONCURRENCY,
                                     bounds=Bounds(ge=0))]
CachePath = Annotated[str | None, flag("LMDB cache folder (default: ~/.cache/tension-run/llm.lmdb)", OUTPUTS,
                                       metavar="PATH")]
# > 0: a limit of 0 would be no limit in LMDB's terms, which nobody means by it; at
# most a petabyte, which LMDB's map size (a size_t) holds.
CacheMaxGB = Annotated[float | None, flag(
    "never let the cache grow past this size, in GB (a number > 0; default: the disk is the limit)", OUTPUTS,
    metavar="GB", bounds=Bounds(gt=0, le=1e6))]
Progress = Annotated[bool, flag("show a progress bar", OUTPUTS)]


# The bounds several settings share. Temperatures past 100 sample nothing a reader
# could tell from noise; a token limit past a million is no context any server has.
TEMPERATURE = Bounds(ge=0, le=100)
TOKENS = Bounds(ge=1, le=1_000_000)


def cache_file_given(path: str | os.PathLike) -> str | None:
    """What is wrong when `path`, given as a cache, is a file (its data.mdb, or
    another), said with the folder to give; None when it is not a file. Every
    setting and verb taking a cache folder says it the same way."""
    p = Path(path)
    if not p.is_file():
        return None
    held = f" ({p.parent})" if p.name == "data.mdb" else " (the LMDB cache is a folder)"
    return f"{path} is a file; give the folder that holds data.mdb{held}"


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of ScoreConfig, GenerateConfig and FairPlayConfig."""

    # A bad value's message names the setting with this prefix: "--" where the
    # message has always named it as a flag (generate), "" elsewhere.
    flag_prefix: ClassVar[str] = ""

    @classmethod
    def complete(cls, data: dict[str, Any], given: set[str]) -> None:
        """Before the settings are built from `data` (defaults not yet in it): what
        depends on which settings the user gave (`given`: a file's keys and the flags,
        not a fallback's), filled in or refused as a ConfigError. Nothing by default."""

    def check(self, ok: bool, field: str, what: str) -> None:
        """Raise a ConfigError naming `field`, what was expected and its value, unless ok."""
        if not ok:
            raise ConfigError(f"{self.flag_prefix}{field.replace('_', '-')}: expected {what}, "
                              f"got {getattr(self, field)!r}")

    # The fields that name files or folders: `~` is expanded in each (a config file's
    # "~/x" is under the home folder, not a folder named "~" in the current one).
    path_fields: ClassVar[tuple[str, ...]] = ("cache",)

    def expand_paths(self) -> None:
        """`~` expanded in every path setting; the cache made absolute, so the run
        record names it for a view or report started elsewhere; a cache given as a
        file (its data.mdb) is a ConfigError saying to give the folder."""
        for name in self.path_fields:
            v = getattr(self, name, None)
            if isinstance(v, str) and v.startswith("~"):
                setattr(self, name, os.path.expanduser(v))
            elif isinstance(v, list):
                setattr(self, name, [os.path.expanduser(x) if isinstance(x, str) else x for x in v])
        cache = getattr(self, "cache", None)
        if cache is not None:
            self.cache = os.path.abspath(cache)
            if (problem := cache_file_given(cache)) is not None:
                raise ConfigError(f"cache: {problem}")

    def check_declared(self) -> None:
        """Every numeric field within the Bounds its declaration carries (a flag and a
        config key alike), else a ConfigError naming the setting; each subclass's
        __post_init__ calls it first."""
        try:
            check_bounds(self)
        except ValueError as e:
            field, _, rest = str(e).partition(": ")
            name = field.replace("_", "-")
            flag_name = _flag_names(type(self)).get(field, name)
            if flag_name != name:  # fairplay's `seed` key is --reader-seed (its --seed seeds the bootstrap)
                name = f"{flag_name} (config key `{field}`)"
            raise ConfigError(f"{self.flag_prefix}{name}: {rest}") from None

    def resolved_api_key(self) -> str | None:
        """The environment variable first, then the config file's `api_key`; a key
        that no HTTP header can carry as it is is a ConfigError (`checked_key`)."""
        # the file's key is checked though the variable wins, as every key of a file is
        own = checked_key(getattr(self, "api_key", None), "the API key (config key `api_key`)")
        env = os.environ.get(API_KEY_ENV)
        return checked_key(env, f"the environment variable {API_KEY_ENV}") if env else own

    def public(self) -> dict[str, Any]:
        return public(self)


def checked_key(key: str | None, source: str) -> str | None:
    """`key` as it is, or a ConfigError saying where it came from and what is wrong
    with it, never the key: a newline (`open("key.txt").read()` keeps the last one),
    another control character, a space or a character past ASCII would be sent as it
    is in the Authorization header (or refused by the HTTP library at the first
    request), which no server takes for the key meant. Nothing is stripped silently:
    the user removes it, before any request."""
    if not key:
        return key
    for i, c in enumerate(key, 1):
        if "!" <= c <= "~":
            continue
        what = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}.get(c)
        if what is None:
            kind = "a control character" if unicodedata.category(c).startswith("C") else "a character past ASCII"
            what = f"{kind} (U+{ord(c):04X})"
        at = "its last character" if i == len(key) else "its first character" if i == 1 else f"character {i}"
        raise ConfigError(f"{source} holds {what} ({at} of {len(key)}); remove it: an API key is sent as it is, "
                          "in an HTTP header")
    return key


def refresh_roles(value: str | None, roles: tuple[str, ...]) -> tuple[str, ...]:
    """The engine roles a verb's --refresh value names ("all": every one of `roles`)."""
    return roles if value == "all" else (value,) if value else ()


def _flag_names(struct: type) -> dict[str, str]:
    """The flag name of each field whose flag is named otherwise (``flag="reader-seed"``)."""
    out = {}
    for f in fields_of(struct):
        for m in typing.get_args(f.type)[1:]:
            if isinstance(m, msgspec.Meta) and m.extra and "flag" in m.extra:
                out[f.name] = m.extra["flag"]
    return out


def env_base_url() -> str | None:
    """The server OPENAI_BASE_URL names, or None when it is unset or empty."""
    return os.environ.get(BASE_URL_ENV, "").strip() or None


def public(cfg: Settings) -> dict[str, Any]:
    """The settings as a run record keeps them: plain data, for the API key only
    whether one is set, never its value, and server URLs without a password
    (``http://user:***@host``)."""
    d = msgspec.to_builtins(cfg)
    d["api_key"] = "(set)" if cfg.resolved_api_key() else None
    for k in [k for k in d if k.endswith("base_url")]:
        d[k] = msgspec.json.decode(redact(msgspec.json.encode(d[k]).decode()))
    return d


def load_settings(struct: type[S], path: str | os.PathLike | None, overrides: dict[str, Any],
                  fallback: dict[str, Any] | None = None, table: str | None = None) -> S:
    """Defaults ← ``fallback`` (e.g. a profile, or the running embedded server) ←
    TOML file ← flags (``overrides``: None means the flag was not given).

    Without ``table`` every key of the file must be a field. With ``table`` (e.g.
    "fairplay") the file may be another verb's: its top-level keys that are
    fields are used and the rest ignored, and the keys of its [table], all of
    which must be fields, win."""
    data: dict[str, Any] = dict(fallback or {})
    given: set[str] = set()
    if path is not None:
        from_file = _file_settings(struct, Path(path), table)
        data.update(from_file)
        given |= set(from_file)
    data.update({k: v for k, v in overrides.items() if v is not None})
    given |= {k for k, v in overrides.items() if v is not None}
    if issubclass(struct, Settings):
        struct.complete(data, given)
    try:
        return msgspec.convert(data, struct)
    except msgspec.ValidationError as e:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}{e}") from e


def _file_settings(struct: type[msgspec.Struct], p: Path, table: str | None) -> dict[str, Any]:
    doc = read_config_file(p)
    known = set(struct.__struct_fields__)
    if table is None:
        for k in doc:
            if k.replace("-", "_") not in known:
                raise ConfigError(f"{p}: unknown key `{k.replace('-', '_')}` (known: {', '.join(sorted(known))})")
        return _checked_keys(struct, p, doc, None)
    inner = doc.pop(table, {})
    if not isinstance(inner, dict):
        raise ConfigError(f"{p}: [{table}] must be a table")
    for k in inner:
        if k.replace("-", "_") not in known:  # said as it is written, as before
            raise ConfigError(f"{p}: unknown key `{k}` in [{table}] (known: {', '.join(sorted(known))})")
    data = _checked_keys(struct, p, {k: v for k, v in doc.items() if k.replace("-", "_") in known}, None)
    data.update(_checked_keys(struct, p, inner, table))
    return data


def _checked_keys(struct: type[msgspec.Struct], p: Path, keys: dict[str, Any], table: str | None) -> dict[str, Any]:
    """The keys of one table of a config file, normalised to fields. Each value is
    checked against its field's type here, with the key's line, whether or not a flag
    overrides it (a file that breaks only in the run without the flag is found now);
    `judge-model` and `judge_model` in one table are one setting given twice."""
    types = {f.name: f.type for f in fields_of(struct)}
    seen: dict[str, str] = {}
    data: dict[str, Any] = {}
    for k, v in keys.items():
        name = k.replace("-", "_")
        if name in seen:
            raise ConfigError(f"{p}: `{k}`{_at_line(p, k, table)} sets `{seen[name]}`{_at_line(p, seen[name], table)} "
                              "again; a setting is given once: keep one")
        seen[name] = k
        try:
            msgspec.convert(v, types[name])  # checked only: the Struct converts the merged settings
        except msgspec.ValidationError as e:
            # said as the Struct's own error says it (`- at $.key`), with the line
            raise ConfigError(f"{p}: {e} - at `$.{name}`{_at_line(p, k, table)}") from e
        data[name] = v
    return data


def _at_line(p: Path, key: str, table: str | None) -> str:
    """" (line N)", where `key` is set in the file (in [table] when given); "" when it
    cannot be found (a key set inside an inline table or as a dotted key)."""
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    pat = re.compile(rf"""\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*=""")
    header = re.compile(r"\s*\[")
    inside = table is None
    for i, line in enumerate(lines, 1):
        if header.match(line):
            inside = table is not None and re.match(rf"\s*\[\s*{re.escape(table)}\s*\]", line) is not None
        elif inside and pat.match(line):
            return f" (line {i})"
    return ""


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The TOML document of a --config file; an unreadable or invalid file is a
    ConfigError naming it."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the config file: {e.strerror or e}") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e


def config_file_keys(path: str | os.PathLike | None) -> set[str]:
    """The keys a config file sets (normalised to underscores); empty without a file."""
    if path is None:
        return set()
    try:
        return {k.replace("-", "_") for k in tomllib.loads(Path(path).read_text(encoding="utf-8"))}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return set()  # load_settings reports the problem with the file


def build_settings(struct: type[S], prefix: str = "", **values: Any) -> S:
    """A kernel settings Struct (CurveSettings, FairPlaySettings) from values, a
    ValueError of its checks ("field: …") reported as a ConfigError naming the
    setting; ``prefix="--"`` names it as a flag."""
    try:
        return struct(**values)
    except ValueError as e:
        field, _, rest = str(e).partition(": ")
        raise ConfigError(f"{prefix}{field.replace('_', '-')}: {rest}") from e

"""Flags from the settings: each verb's settings flags are built from the fields of
the Struct they fill (their help, group, name and default are the field's
metadata and default), and read back into that Struct's keys by `overrides`.

Every flag that takes one value may be given once: a repeated one is a usage
error naming it, never silently the last.
"""

from __future__ import annotations

import argparse
import types
import typing
import weakref
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

import msgspec

from tension.core.config import FairPlayConfig, ScoreConfig
from tension.kernels.settings import (
    INT_MAX,
    MIN_INTERVAL_RESAMPLES,
    Bounds,
    FairPlaySettings,
    bounds_of,
    check_interval_resamples,
)

__all__ = ["Verb", "Once", "OnceBool", "FlagSpec", "CONFIG_ONLY", "SERVER_ENV", "flag_specs", "fields_in",
           "add_settings_flags", "overrides", "given", "float_list", "group_for", "add_bootstrap_flags", "count",
           "EMPTY_ALLOWED", "number", "Number", "PORT", "declared_bounds"]

_API_KEY_REASON = ("a secret: the OPENAI_API_KEY environment variable or the config file, never the command "
                   "line (shell history, ps)")
# Settings fields that are no flag, and why. A field missing both a flag group
# and an entry here fails tests/core/test_cli.py.
CONFIG_ONLY: dict[type, dict[str, str]] = {
    ScoreConfig: {"api_key": _API_KEY_REASON},
    FairPlayConfig: {"api_key": _API_KEY_REASON},
    FairPlaySettings: {"tie_eps": "the definitions fix it (docs/fairplay.md); set from Python only",
                       "early_threshold": "the definitions fix it (> 0.5, docs/fairplay.md); set from Python only",
                       "confidence": "the 95% level of the pooled hit curves' intervals; set from Python only"},
}

# The environment variables a verb that talks to a server reads, for its --help.
SERVER_ENV = ("environment: OPENAI_API_KEY holds the API key (sent as a bearer token, never written to logs, "
              "outputs or the cache); XDG_CACHE_HOME moves ~/.cache, which holds the LMDB cache and the embedded "
              "server. OPENAI_BASE_URL names the server when no --base-url is given (before a running "
              "embedded server).")


class Verb(msgspec.Struct, frozen=True):
    """One verb of the command: its name ("cache stats" for a nested one), the
    function it runs (whose docstring is its help), the function that adds its
    flags, the settings Structs those flags fill and the destinations of its
    flags that are no settings field (positionals, --out, --config, …)."""

    name: str
    run: Callable[[argparse.Namespace], int]
    add_flags: Callable[[argparse.ArgumentParser], None]
    settings: tuple[type, ...] = ()
    verb_only: frozenset[str] = frozenset()
    epilog: str | None = None


# Flags whose empty value means something: "" clears a config file's system prompt.
EMPTY_ALLOWED = frozenset({"system"})


class Once(argparse.Action):
    """Stores a flag's value; a second one is a usage error naming the flag, and so
    is an empty one (`--out ""` would write into the current folder, a path "" names
    no file; EMPTY_ALLOWED lists the exceptions)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if isinstance(values, str) and not values.strip() and self.dest not in EMPTY_ALLOWED:
            raise argparse.ArgumentError(self, f"expected a value, got {values!r}")
        _first_time(self, namespace, values)
        setattr(namespace, self.dest, values)


class Number:
    """An argparse type for a flag that is no settings field: an int or a float
    within declared Bounds (kernels.settings.Bounds, the same rule the settings'
    fields declare), so that -1, nan, inf or 2**80 is a usage error at parse time,
    never a traceback or a silent no-op later. tests/core/test_numeric_flags.py
    finds every flag of this type, and every settings flag, and tries them."""

    def __init__(self, kind: type, bounds: Bounds) -> None:
        self.kind, self.bounds = kind, bounds
        self.__name__ = kind.__name__  # argparse names the type in its messages; the snapshots read it

    def __call__(self, text: str) -> Any:
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.bounds.text(self.kind is int)}, got {text!r}") from None
        if (what := self.bounds.expected(value, self.kind is int)) is not None:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value


def number(kind: type, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None) -> Number:
    """``number(int, ge=1)``: the argparse type of a numeric flag with its bounds."""
    return Number(kind, Bounds(ge=ge, gt=gt, le=le, lt=lt))


def _resamples(none: bool) -> Callable[[str], int]:
    """An argparse type: bootstrap resamples, 0 (when `none`) or 100 to 10,000,000. A
    percentile interval's ends need 100 or more (check_interval_resamples): fewer gave
    intervals that miss their own mean, and a traceback where a figure drew one; more is
    memory, not precision."""
    whole = count(0, 10_000_000)

    def parse(text: str) -> int:
        n = whole(text)
        if n == 0 and not none:
            raise argparse.ArgumentTypeError(
                f"expected at least {MIN_INTERVAL_RESAMPLES}, got 0: a finding needs its bootstrap interval")
        try:
            check_interval_resamples(n, "resamples")
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("resamples: ")) from None
        return n

    parse.__name__ = "resamples"
    return parse


def count(minimum: int = 0, maximum: int = INT_MAX) -> Number:
    """An argparse type: an integer >= `minimum` (and <= `maximum`)."""
    return number(int, ge=minimum, le=None if maximum == INT_MAX else maximum)


# a TCP port; 0 asks the system for a free one where a verb says so
PORT = Bounds(ge=0, le=65535)


class OnceBool(argparse.BooleanOptionalAction):
    """--x / --no-x, given at most once."""

    def __call__(self, parser, namespace, values, option_string=None):
        _first_time(self, namespace, not option_string.startswith("--no-"))
        super().__call__(parser, namespace, values, option_string)


def _first_time(action: argparse.Action, namespace: argparse.Namespace, value: Any) -> None:
    # The namespace remembers which destinations were set from the command line:
    # a default can equal a given value, so the value alone cannot tell.
    given = vars(namespace).setdefault("flags_given", set())
    if action.dest in given:
        raise argparse.ArgumentError(action, f"given twice ({getattr(namespace, action.dest)!r}, then {value!r}); "
                                             "give it once")
    given.add(action.dest)


def float_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


class FlagSpec(msgspec.Struct, frozen=True):
    """The flag of one settings field."""

    field: str
    names: tuple[str, ...]  # option strings, the flag's own name first
    dest: str
    group: str
    description: str
    kind: Any  # bool, int, float, str, float_list, or "append" (a list field: the flag repeats)
    comma_list: bool  # a tuple of strings, given as "a,b,c"
    default: Any  # the Struct's
    default_text: str | None  # the default as --help shows it; None: the description says it
    metavar: str | None = None
    choices: tuple[str, ...] | None = None

    def help(self, description: str | None = None) -> str:
        text = description or self.description
        if self.default_text is not None:
            text += f" (default: {self.default_text})"
        return text.replace("%", "%%")  # argparse formats help with %


@cache
def flag_specs(struct: type) -> tuple[FlagSpec, ...]:
    """The flags of a settings Struct's fields that have a flag group, in field order."""
    specs = []
    for f in msgspec.structs.fields(struct):
        meta = next((m for m in typing.get_args(f.type)[1:] if isinstance(m, msgspec.Meta)), None)
        if meta is None or not meta.extra or "group" not in meta.extra:
            continue
        extra = meta.extra
        tp = typing.get_args(f.type)[0]
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        name = extra.get("flag", f.name.replace("_", "-"))
        specs.append(FlagSpec(
            field=f.name, names=tuple(f"--{n}" for n in (name, *extra.get("aliases", ()))),
            dest=extra.get("dest", f.name), group=extra["group"], description=meta.description or "",
            kind=_kind(tp), comma_list=_kind(tp) is str and typing.get_origin(tp) is tuple,
            default=default, default_text=extra.get("default", _shown(default)), metavar=extra.get("metavar"),
            choices=extra.get("choices")))
    return tuple(specs)


def _kind(tp) -> Any:
    """How a field's flag reads its value. A field of several shapes (a URL or a
    list of them; a count or a list of paragraphs) takes the text as given."""
    shapes = [t for t in typing.get_args(tp) if t is not type(None)] \
        if typing.get_origin(tp) in (typing.Union, types.UnionType) else [tp]
    if len(shapes) > 1:
        return str
    (t,) = shapes
    if typing.get_origin(t) is list:
        return "append"
    if typing.get_origin(t) is tuple:
        return float_list if typing.get_args(t)[0] in (int, float) else str
    return t


def _shown(value: Any) -> str | None:
    if value is None or value == [] or value == ():
        return None
    return _shown_value(value)


def _shown_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(_shown_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def fields_in(struct: type, *groups: str, skip: Iterable[str] = ()) -> list[str]:
    """The fields of `struct` whose flags are in these groups, but not `skip`."""
    return [s.field for s in flag_specs(struct) if s.group in groups and s.field not in set(skip)]


_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def group_for(parser: argparse.ArgumentParser, title: str):
    """The parser's flag group of this title, made on first use (--help lists the
    groups in that order)."""
    groups = _groups.setdefault(parser, {})
    if title not in groups:
        groups[title] = parser.add_argument_group(title)
    return groups[title]


def declared_bounds(struct: type, field: str) -> Bounds:
    """The Bounds a settings field declares, for a verb's own flag of the same value
    (report's --gpu-hour-usd is score's)."""
    return bounds_of(struct)[field][0]


def add_settings_flags(parser: argparse.ArgumentParser, struct: type, fields: Iterable[str] | None = None, *,
                       defaults: bool = False, group: str | None = None, help: dict[str, str] | None = None) -> None:
    """Add the flags of `struct`'s fields (all that have a group, or `fields`).

    ``defaults=False``: an absent flag is None, so a config file or a fallback
    can set the value (the Struct's default is still shown in --help);
    ``defaults=True``: an absent flag is the Struct's default. ``group`` puts the
    flags under another title, ``help`` gives a verb its own wording of a field."""
    wanted = None if fields is None else set(fields)
    for spec in flag_specs(struct):
        if wanted is not None and spec.field not in wanted:
            continue
        g = group_for(parser, group or spec.group)
        kw: dict[str, Any] = {"dest": spec.dest, "help": spec.help((help or {}).get(spec.field)),
                              "default": spec.default if defaults else None}
        if spec.kind is bool:
            g.add_argument(*spec.names, action=OnceBool, **kw)
        elif spec.kind == "append":
            g.add_argument(*spec.names, action="append", metavar=spec.metavar, **kw)
        else:
            g.add_argument(*spec.names, action=Once, type=spec.kind, metavar=spec.metavar, choices=spec.choices,
                           **kw)


def overrides(args: argparse.Namespace, struct: type,
              parse: dict[str, Callable[[Any], Any]] | None = None) -> dict[str, Any]:
    """The values of `struct`'s fields that are flags of this verb, by field name,
    None where the flag was not given. ``parse`` turns a field's flag text into
    its value where the flag's type cannot (e.g. a count or a list)."""
    out = {}
    for spec in flag_specs(struct):
        if not hasattr(args, spec.dest):
            continue  # not a flag of this verb
        value = getattr(args, spec.dest)
        if value is not None and parse and spec.field in parse:
            value = parse[spec.field](value)
        elif value is not None and spec.comma_list:
            value = tuple(v.strip() for v in value.split(",") if v.strip())
        out[spec.field] = value
    return out


def given(args: argparse.Namespace, struct: type,
          parse: dict[str, Callable[[Any], Any]] | None = None) -> dict[str, Any]:
    """The flags of `struct`'s fields the user gave, as the API's keyword arguments
    (core/api/verbs.py): `overrides` without the ones not given."""
    return {k: v for k, v in overrides(args, struct, parse).items() if v is not None}


def add_bootstrap_flags(g, floor: bool = False, none: bool = True) -> None:
    """--resamples and --seed of the bootstrap intervals (report, compare, the fair-play metrics).
    `floor`: at least 100 resamples (report, compare: a figure or a finding rests on the
    interval's ends); `none`: 0 (no interval) allowed too; compare, whose ✓ needs it, says no."""
    if not floor:  # more resamples than this is memory, not precision
        g.add_argument("--resamples", type=count(0, 10_000_000), default=10_000,
                       help="bootstrap resamples (default: %(default)s)")
    else:
        g.add_argument("--resamples", type=_resamples(none), default=10_000,
                       help=f"bootstrap resamples ({'0 = no intervals, else ' if none else ''}at least "
                            f"{MIN_INTERVAL_RESAMPLES}; default: %(default)s)")
    g.add_argument("--seed", type=count(0), default=0, help="bootstrap seed (default: %(default)s)")

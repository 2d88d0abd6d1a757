"""Every numeric flag of every verb, and every numeric key of a --config file, with
-1, 0, nan, inf, 1e309 and 2**80 (review 2026-12-01, 3c and 11e; issue 25 finding 8).

The flags are found, not listed: every option of `build_parser()` whose argparse
type is a number (a settings field's int or float, a `flags.Number`, a list of
numbers) and every settings flag whose field declares Bounds. Each value is either
inside the declared bounds (kernels.settings.Bounds) or a usage error, exit 2,
naming the flag; a value inside them runs the real verb against the loopback
server and must not crash later either (it may still be a usage error of a rule
between settings, e.g. --max-words 0 below --min-words) (no exception out of `main`, no Python
exception's name on stderr: `--seed 2**80` once became "OverflowError … rerun the
same command"). Verbs that would start a server (route, serve, demo) are only
parsed when a value is accepted.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import typing
from pathlib import Path

import msgspec
import pytest

from tension.core.cli import VERBS, build_parser, main
from tension.core.cli.flags import CONFIG_ONLY, Number, flag_specs, float_list
from tension.kernels.settings import bounds_of
from tension.testing.corpus import make_corpus

ROOT = Path(__file__).resolve().parents[2]
VALUES = ("-1", "0", "nan", "inf", "1e309", str(2**80))
PARSE_ONLY = {"route", "serve", "demo", "audit label"}  # an accepted value would start a server
_REPORT = next(v for v in VERBS if v.name == "report")
# The fields score's report reads again from the run (the report verb's settings and
# own flags): a value of one of them is walked through the report; score's other
# values skip drawing it (--no-report, half of each small run's time).
REPORT_READS = frozenset({f for s in _REPORT.settings for f in s.__struct_fields__} | _REPORT.verb_only)
# An exception's name on stderr: "error: OverflowError: …" is a crash told as a run failure.
CRASH = re.compile(r"Traceback|\b[A-Z][A-Za-z]*(Error|Exception):")


def _subparser(verb: str) -> argparse.ArgumentParser:
    p = build_parser()
    for name in verb.split():
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[name]
    return p


def _numeric(tp) -> bool:
    if tp in (int, float):
        return True
    return any(_numeric(a) for a in typing.get_args(tp) if a is not bool)


def _bounds(verb) -> dict[str, tuple]:
    """Option string -> (Bounds, integer?) of each numeric flag of a verb."""
    out = {}
    for struct in verb.settings:
        for spec in flag_specs(struct):
            if spec.field in bounds_of(struct):
                out[spec.names[0]] = bounds_of(struct)[spec.field]
    for a in _subparser(verb.name)._actions:
        if isinstance(a.type, Number) and a.option_strings:
            out[a.option_strings[0]] = (a.type.bounds, a.type.kind is int)
    return out


def _numeric_flags() -> list[tuple[str, str]]:
    return [(v.name, f) for v in VERBS for f in _bounds(v)]


def test_every_numeric_flag_and_field_declares_its_bounds():
    """A numeric flag with a bare int/float type, or a numeric settings field without
    Bounds, would escape the walk below: each must declare them."""
    for verb in VERBS:
        declared = _bounds(verb)
        for a in _subparser(verb.name)._actions:
            if a.option_strings and (a.type in (int, float, float_list) or isinstance(a.type, Number)):
                assert a.option_strings[0] in declared, f"{verb.name} {a.option_strings[0]}: no declared bounds"
        for struct in verb.settings:
            for f in msgspec.structs.fields(struct):
                tp = typing.get_args(f.type)[0] if typing.get_origin(f.type) is typing.Annotated else f.type
                if _numeric(tp) and tp is not bool:
                    assert f.name in bounds_of(struct), f"{struct.__name__}.{f.name}: numeric, no declared Bounds"
    assert len(_numeric_flags()) > 100  # the walk finds them (score alone has over 30)
    assert CONFIG_ONLY  # the config-only fields are walked as config keys below


def _story_file(tmp: Path) -> Path:
    p = tmp / "who.jsonl"
    segs = [f"Paragraph {i}: Ada, Bo and Cy wait by the lamp; the key is gone." for i in range(1, 7)]
    p.write_text(json.dumps({"id": "w1", "segments": segs, "suspects": ["Ada", "Bo", "Cy"], "culprit": "Bo"})
                 + "\n")
    return p


def _reader_answers(msgs, n, seed):
    text = "\n".join(m["content"] for m in msgs)
    if "reveal at its end as the true culprit" in text:
        return json.dumps({"culprit": "Bo"})
    if "probabilities" in text.lower():
        return json.dumps({"suspects": ["Ada", "Bo", "Cy"], "probabilities": [0.2, 0.5, 0.3]})
    return None


class Verbs:
    """The smallest real invocation of each verb, as {flag: value} after its positionals."""

    def __init__(self, server, tmp: Path):
        self.server, self.tmp = server, tmp
        self.corpus = make_corpus(tmp / "c.jsonl", 1, seed=2)
        self._run: Path | None = None

    def run_dir(self) -> Path:
        if self._run is None:
            self._run = self.tmp / "run"
            assert main(["score", str(self.corpus), "--out", str(self._run), *self.server_flags("score"),
                         "--endings", "2", "--no-progress"]) == 0
        return self._run

    def server_flags(self, verb: str) -> list[str]:
        if verb in ("fairplay",):
            return ["--base-url", self.server.base_url, "--model", "test-judge", "--cache", str(self.tmp / "cache")]
        return ["--base-url", self.server.base_url, "--model", "test-gen", "--cache", str(self.tmp / "cache")]

    def argv(self, verb: str, out: Path, field: str = "") -> tuple[list[str], dict[str, str]]:
        """`field`: the setting walked; score draws its report only if the report reads it."""
        srv = dict(zip(self.server_flags(verb)[::2], self.server_flags(verb)[1::2]))
        if verb == "score":
            report = {} if field in REPORT_READS else {"--no-report": ""}
            return ["score", str(self.corpus)], {"--out": str(out), **srv, "--endings": "2", "--no-progress": "",
                                                 **report}
        if verb == "estimate":
            return ["estimate", str(self.corpus)], {**srv, "--endings": "2"}
        if verb == "bench":
            return ["bench"], {**srv, "--endings": "2", "--positions": "1", "--no-variants": "", "--no-progress": ""}
        if verb == "generate":
            return ["generate", str(ROOT / "examples" / "ideas.jsonl")], {
                "--out": str(out / "s.jsonl"), **srv, "--mode": "vanilla", "--no-progress": "", "--min-chars": "0"}
        if verb == "fairplay":
            self.server.respond(_reader_answers)
            return ["fairplay", str(_story_file(self.tmp))], {
                "--out": str(out), **srv, "--k": "1", "--schedule": "2,4", "--no-progress": "", "--max-plots": "0",
                "--resamples": "20", "--readers": "gullible,know_it_all"}
        if verb == "fairplay-metrics":
            return ["fairplay-metrics", str(ROOT / "examples" / "fairplay_readers.jsonl")], {
                "--out": str(out), "--max-plots": "0", "--no-progress": "", "--resamples": "20"}
        if verb == "metrics":
            return ["metrics", str(ROOT / "examples" / "sample_curves.jsonl")], {"--out": str(out)}
        if verb == "report":
            return ["report", str(self.run_dir())], {"--max-curves": "0", "--resamples": "20"}
        if verb == "compare":
            return ["compare", str(self.run_dir()), str(self.run_dir())], {"--resamples": "20"}
        if verb == "view":
            return ["view", str(self.run_dir())], {"--export": str(out)}
        if verb == "serve":
            return ["serve", "--profile", "paper"], {}
        if verb == "demo":
            return ["demo"], {"--out": str(out)}
        if verb == "subsample":
            return ["subsample", str(self.run_dir())], {"--cache": str(self.tmp / "cache"), "--draws": "2", "--ks": "1,2"}
        if verb == "route":
            return ["route", self.server.base_url], {}
        if verb in ("audit sample", "audit label"):  # the audit of a run's judge (issue 60)
            return [*verb.split(), str(self.run_dir())], {"--cache": str(self.tmp / "cache")}
        if verb == "audit report":
            return ["audit", "report", str(self.run_dir())], {}
        raise AssertionError(f"no invocation of {verb}: add one")


def _accepted(bounds, integer: bool, text: str) -> bool:
    try:
        v = int(text) if integer else float(text)
    except ValueError:
        return False
    return bounds.expected(v, integer) is None


def _flat(positional: list[str], flags: dict[str, str], extra: list[str]) -> list[str]:
    given = set(extra[::2])
    return [*positional, *(x for f, v in flags.items() if f not in given for x in ((f, v) if v else (f,))), *extra]


@pytest.mark.parametrize("verb", sorted({v for v, _ in _numeric_flags()}))
@pytest.mark.in_process
def test_every_numeric_flag_takes_hostile_values_as_a_usage_error_or_a_clean_run(server, tmp_path, tension_run,
                                                                                  verb):
    spec = next(v for v in VERBS if v.name == verb)
    verbs = Verbs(server, tmp_path)
    wrong = []
    for flag, (bounds, integer) in _bounds(spec).items():
        for i, text in enumerate(VALUES):
            out = tmp_path / f"out-{flag.strip('-')}-{i}"
            positional, flags = verbs.argv(verb, out, flag.lstrip("-").replace("-", "_"))
            argv = _flat(positional, flags, [flag, text])
            ok = _accepted(bounds, integer, text)
            if ok and verb in PARSE_ONLY:
                _subparser(verb).parse_args(argv[len(verb.split()):])
                continue
            r = tension_run(*argv)
            rc, err = r.returncode, r.stderr
            if CRASH.search(err) or (not ok and (rc != 2 or flag.lstrip("-") not in err)) or (ok and rc not in (0, 1, 2)):
                wrong.append(f"{verb} {flag} {text}: rc {rc}, accepted by the bounds: {ok}: {err.strip()[-300:]}")
            shutil.rmtree(out, ignore_errors=True)
    assert not wrong, "\n".join(wrong)


CONFIG_VERBS = ["score", "estimate", "bench", "generate", "fairplay"]


@pytest.mark.parametrize("verb", CONFIG_VERBS)
@pytest.mark.in_process
def test_every_numeric_config_key_takes_hostile_values_as_a_usage_error_or_a_clean_run(server, tmp_path,
                                                                                       tension_run, verb):
    """The same values as keys of a --config file: every numeric field of the verb's
    settings Struct, config-only fields included."""
    spec = next(v for v in VERBS if v.name == verb)
    struct = spec.settings[0]
    verbs = Verbs(server, tmp_path)
    toml = {"-1": "-1", "0": "0", "nan": "nan", "inf": "inf", "1e309": "1e309", str(2**80): str(2**80)}
    wrong = []
    for field, (bounds, integer) in bounds_of(struct).items():
        for i, text in enumerate(VALUES):
            out = tmp_path / f"out-{field}-{i}"
            cfg = tmp_path / "cfg.toml"
            cfg.write_text(f"{field} = {toml[text]}\n")
            positional, flags = verbs.argv(verb, out, field)
            names = next((f.names for f in flag_specs(struct) if f.field == field), ())
            flags = {f: v for f, v in flags.items() if f not in names}  # a flag would win over the key
            argv = _flat(positional, flags, ["--config", str(cfg)])
            ok = _accepted(bounds, integer, text) and not (integer and text in ("nan", "inf", "1e309"))
            r = tension_run(*argv)
            rc, err = r.returncode, r.stderr
            name = field.replace("_", "-")
            if CRASH.search(err) or (not ok and (rc != 2 or (name not in err and field not in err))) \
                    or (ok and rc not in (0, 1, 2)):
                wrong.append(f"{verb} config {field} = {text}: rc {rc}, accepted by the bounds: {ok}: "
                             f"{err.strip()[-300:]}")
            shutil.rmtree(out, ignore_errors=True)
    assert not wrong, "\n".join(wrong)

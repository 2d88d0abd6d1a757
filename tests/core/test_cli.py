"""The command line: every verb's help, flags that are the settings' fields (one
each), start-up without the heavy libraries, a repeated flag, `generate --config`,
and every flag the README and docs/ write down."""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from tension.core.cli import VERBS, build_parser, main
from tension.core.cli.flags import CONFIG_ONLY, flag_specs
from tension.core.cli.serve import EMBEDDED_FLAGS
from tension.core.config import FairPlayConfig, GenerateConfig, ScoreConfig
from tension.kernels.settings import CurveSettings, FairPlaySettings
from tension.testing.openai_server import CHAT_PATH

ROOT = Path(__file__).resolve().parents[2]
STRUCTS = (ScoreConfig, GenerateConfig, FairPlayConfig, CurveSettings, FairPlaySettings)


# The CLI's whole parser, built once for the module's reading specs: it depends on nothing but the code
# (no environment, no file), and building it for each verb read (≈ 25 ms) was ≈ 8 s of this module's CPU
_whole_parser = functools.cache(build_parser)


def verb_parser(name: str, parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or _whole_parser()
    for word in name.split():
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return p


def flags_of(name: str) -> set[str]:
    return {o for a in verb_parser(name)._actions for o in a.option_strings}


def parse_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as ei:
        build_parser().parse_args(argv)
    assert ei.value.code == 2
    return capsys.readouterr().err


# --- help -----------------------------------------------------------------------

@pytest.mark.parametrize("argv", [[]] + [v.name.split() for v in VERBS], ids=["top"] + [v.name for v in VERBS])
def test_every_help_exits_0(argv, capsys):
    with pytest.raises(SystemExit) as ei:
        main([*argv, "--help"])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: tension-run {' '.join(argv)}".rstrip())


def test_top_level_help_lists_every_verb_with_its_docstring(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = "".join(capsys.readouterr().out.split())  # --help wraps lines, even inside words
    assert "bootstrap95%interval" in out  # compare's help has a %: it used to crash --help
    for v in VERBS:
        if " " in v.name:  # a nested verb: its group is listed
            assert v.name.split()[0] in out
        else:
            assert "".join(v.run.__doc__.split("\n\n")[0].split()) in out, v.name


def test_help_shows_the_structs_defaults_and_the_environment(capsys):
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    out = capsys.readouterr().out
    endings = out.split("\n  --endings ENDINGS", 1)[1].split("\n  --", 1)[0]
    assert "(default: 100)" in endings
    assert "(default: 30,60,120)" in " ".join(out.split())
    assert "OPENAI_API_KEY" in out and "OPENAI_BASE_URL names the server" in " ".join(out.split())
    for verb in ("estimate", "bench", "fairplay", "generate"):
        assert "OPENAI_API_KEY" in verb_parser(verb).format_help()


def test_every_settings_flag_help_names_the_structs_default():
    for v in VERBS:
        p = verb_parser(v.name)
        for struct in v.settings:
            for spec in flag_specs(struct):
                action = next((a for a in p._actions if a.dest == spec.dest), None)
                if action is not None and spec.default_text is not None:
                    assert f"(default: {spec.default_text})" in action.help, (v.name, spec.field)


def test_openai_base_url_is_read_in_one_place():
    # --help says it names the server; one module reads it (core/config/settings.py)
    readers = [f for f in (ROOT / "core").rglob("*.py")
               if "environ" in (t := f.read_text(encoding="utf-8")) and "BASE_URL_ENV" in t]
    assert [f.relative_to(ROOT).as_posix() for f in readers] == ["core/config/settings.py"]


# --- flags from the settings ------------------------------------------------------

def test_every_field_has_a_description_and_no_constraint():
    for struct in STRUCTS:
        for f in msgspec.structs.fields(struct):
            metas = [m for m in getattr(f.type, "__metadata__", ()) if isinstance(m, msgspec.Meta)]
            assert len(metas) == 1 and metas[0].description, (struct.__name__, f.name)
            m = metas[0]
            constraints = (m.gt, m.ge, m.lt, m.le, m.multiple_of, m.pattern, m.min_length, m.max_length, m.tz)
            assert constraints == (None,) * len(constraints), (struct.__name__, f.name)


def test_the_metadata_leaves_decoding_errors_as_they_were():
    with pytest.raises(msgspec.ValidationError, match=r"^Expected `int`, got `str` - at `\$.endings`$"):
        msgspec.convert({"endings": "many"}, ScoreConfig)
    with pytest.raises(msgspec.ValidationError, match=r"^Expected `str \| array`, got `int` - at `\$.base_url`$"):
        msgspec.convert({"base_url": 3}, ScoreConfig)


def _primary_verb(struct: type) -> str:
    return next(v.name for v in VERBS if struct in v.settings)


@pytest.mark.parametrize("struct", STRUCTS, ids=lambda s: s.__name__)
def test_every_settings_field_has_exactly_one_flag_or_is_config_only(struct):
    config_only = CONFIG_ONLY.get(struct, {})
    fields = set(struct.__struct_fields__)
    flagged = {s.field for s in flag_specs(struct)}
    assert set(config_only) <= fields, "CONFIG_ONLY names a field that is gone"
    assert not flagged & set(config_only), "a CONFIG_ONLY field has a flag"
    assert fields == flagged | set(config_only), f"fields with neither a flag nor a CONFIG_ONLY entry: " \
                                                 f"{fields - flagged - set(config_only)}"
    # on the verb whose settings they are, each flagged field is one flag
    dests = Counter(a.dest for a in verb_parser(_primary_verb(struct))._actions)
    for spec in flag_specs(struct):
        assert dests[spec.dest] == 1, spec.field
    # and a config-only field is a flag nowhere
    every_dest = {a.dest for v in VERBS for a in verb_parser(v.name)._actions}
    assert not set(config_only) & every_dest


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: v.name)
def test_every_flag_is_a_settings_field_or_declared_verb_only(verb):
    p = verb_parser(verb.name)
    fields = {s.dest for struct in verb.settings for s in flag_specs(struct)}
    dests = {a.dest for a in p._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))}
    assert dests - fields <= verb.verb_only, f"flags neither a field nor declared verb-only: {dests - fields - verb.verb_only}"
    assert verb.verb_only <= dests, f"declared verb-only but no flag: {verb.verb_only - dests}"
    assert not verb.verb_only & fields, "a settings field declared verb-only"


def test_judge_constraint_is_a_flag_of_score():
    args = build_parser().parse_args(["score", "c.jsonl", "--out", "o", "--judge-constraint", "logprobs"])
    assert args.judge_constraint == "logprobs"


def test_fairplay_names_the_reader_server_as_score_names_its_servers():
    parse = build_parser().parse_args
    a = parse(["fairplay", "s.jsonl", "--out", "o", "--base-url", "http://a:1", "--model", "m"])
    b = parse(["fairplay", "s.jsonl", "--out", "o", "--reader-base-url", "http://a:1", "--reader-model", "m"])
    assert (a.reader_base_url, a.reader_model) == (b.reader_base_url, b.reader_model) == ("http://a:1", "m")
    for verb in ("score", "estimate", "bench", "generate", "fairplay"):
        assert {"--base-url", "--model"} <= flags_of(verb), verb


def test_embedded_flags_are_embedded_settings_with_their_defaults():
    from tension.core.serving.embedded import EmbeddedSettings

    d = EmbeddedSettings()
    for name in EMBEDDED_FLAGS:
        assert name in EmbeddedSettings.__struct_fields__
    helps = {a.dest: a.help for a in verb_parser("serve")._actions}
    assert f"(default: {d.port})" in helps["port"]
    assert f"(default: {'on' if d.enforce_eager else 'off'})" in helps["enforce_eager"]
    assert f"(VLLM_CPU_KVCACHE_SPACE; default: {d.kv_cache_gib})" in helps["kv_cache_gib"]
    from tension.core.serving.profiles import DEMO_KV_CACHE_GIB

    demo = {a.dest: a.help for a in verb_parser("demo")._actions}
    assert f"default: {DEMO_KV_CACHE_GIB} for the demo, {d.kv_cache_gib} for serve" in demo["kv_cache_gib"]


def test_reserved_cpus_reaches_the_server_s_environment(tmp_path):
    """`serve --embedded --reserved-cpus N` / `demo --reserved-cpus N`: parsed, made a setting,
    and given to vLLM as VLLM_CPU_NUM_OF_RESERVED_CPU; out of bounds, a usage error."""
    from tension.core.cli.serve import _embedded_settings
    from tension.core.serving.embedded import server_env

    for argv in (["serve", "--embedded", "--reserved-cpus", "1"], ["demo", "--reserved-cpus", "1"]):
        s = _embedded_settings(build_parser().parse_args(argv))
        assert s.reserved_cpus == 1 and server_env(tmp_path, s, base={})["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" in verb_parser("serve").format_help()
    r = subprocess.run([sys.executable, "-m", "tension.core.cli", "serve", "--embedded", "--reserved-cpus", "-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--reserved-cpus" in r.stderr and "Traceback" not in r.stderr


# --- one value per flag -----------------------------------------------------------

@pytest.mark.parametrize("argv, flag", [
    (["score", "c.jsonl", "--out", "o", "--base-url", "http://a:1", "--base-url", "http://b:1"], "--base-url"),
    (["score", "c.jsonl", "--out", "o", "--out", "p"], "--out"),
    (["score", "c.jsonl", "--out", "o", "--progress", "--no-progress"], "--progress"),
    (["metrics", "c.jsonl", "--out", "o", "--window", "5", "--window", "5"], "--window"),
    (["fairplay", "s.jsonl", "--out", "o", "--base-url", "http://a:1", "--reader-base-url", "http://b:1"],
     "--base-url"),
])
def test_a_repeated_flag_is_an_error_naming_it(argv, flag, capsys):
    err = parse_error(capsys, argv)
    assert f"argument {flag}" in err and "given twice" in err


def test_a_repeatable_flag_accumulates():
    args = build_parser().parse_args(["generate", "i.jsonl", "--out", "o.jsonl", "--reference-story", "a.txt",
                                      "--reference-story", "b.txt"])
    assert args.reference_stories == ["a.txt", "b.txt"]


# --- generate --config ------------------------------------------------------------

@pytest.mark.in_process
def test_generate_reads_a_config_file_and_flags_win(server, tmp_path, capsys):
    server.script("Write the story now.", lambda m, seed, i: "The ferry left without her. " * 12)
    ideas = tmp_path / "ideas.jsonl"
    ideas.write_text(json.dumps({"id": "lamp", "idea": "A keeper finds a letter dated next year."}) + "\n")
    cfg = tmp_path / "gen.toml"
    cfg.write_text(f'base-url = "{server.base_url}"\nmodel = "test-gen"\nmode = "vanilla"\nmax_tokens = 77\n'
                   f'seed = 3\ncache = "{tmp_path / "cache"}"\nprogress = false\n')
    out = tmp_path / "stories.jsonl"
    assert main(["generate", str(ideas), "--out", str(out), "--config", str(cfg), "--seed", "4"]) == 0, \
        capsys.readouterr().err
    from tension.core.pipelines.generate import run_record_path

    bodies = [r.body for r in server.requests if r.path == CHAT_PATH]
    assert bodies and all(b["max_tokens"] == 77 for b in bodies)  # from the file
    record = json.loads(run_record_path(out).read_text())
    assert record["config"]["seed"] == 4 and record["config"]["mode"] == "vanilla"  # the flag beats the file

    cfg.write_text("endings = 5\n")  # a score key is no generate key
    assert main(["generate", str(ideas), "--out", str(out), "--config", str(cfg)]) == 2
    assert f"{cfg}: unknown key `endings`" in capsys.readouterr().err


# --- start-up --------------------------------------------------------------------

HEAVY = {"numba", "numpy", "scipy", "aiohttp", "matplotlib", "lmdb"}
CHILD = """\
import sys
from tension.core.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("MODULES", " ".join(sorted(sys.modules)))
"""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["score", "--help"], ["fairplay", "--help"]])
def test_start_up_imports_no_heavy_library(argv):
    r = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, check=True)
    line = next(x for x in r.stdout.splitlines() if x.startswith("MODULES "))
    loaded = {m.split(".")[0] for m in line.split()[1:]}
    assert "tension" in loaded  # the check ran
    assert not HEAVY & loaded


def test_version_is_printed():
    r = subprocess.run([sys.executable, "-m", "tension.core.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and re.fullmatch(r"tension-run \S+\n", r.stdout)


# --- the flags the docs write down ------------------------------------------------

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VERB_NAMES = sorted((v.name for v in VERBS), key=len, reverse=True)  # "cache stats" before "cache"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
COMMAND = re.compile(r"tension-run (" + "|".join(re.escape(n) for n in VERB_NAMES) + r")\b")


def _verb_at_start(text: str) -> str | None:
    """The verb a code span starts with, as in `compare --pair-by idea_id`."""
    return next((n for n in VERB_NAMES if text == n or text.startswith(n + " ")), None)


def doc_mentions(text: str):
    """(verbs, flags, line) for every place a markdown text names flags.

    - a `tension-run VERB …` command (fenced code lines, with `\\` continuations
      and VAR="…" shell variables expanded, and inline code): its flags, on VERB;
    - inline code that starts with a verb (`serve --stop`): on that verb;
    - any other flag in prose or inline code (`--min-words`): on a verb of the
      section, when its heading names `tension-run VERB`, else on some verb.
    Code that runs another program (`vllm serve … --port`, `pip install --no-deps`)
    is skipped."""
    headings: list[tuple[int, tuple[str, ...]]] = []
    fence, shell_vars, pending = False, {}, ""
    for n, line in _paragraphs(text):
        if line.lstrip().startswith("```"):
            fence, shell_vars = not fence, {}
            continue
        if fence:
            pending += line
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            code, pending = pending, ""
            if m := re.fullmatch(r"\s*(\w+)=\"([^\"]*)\"\s*", code):
                shell_vars[m.group(1)] = m.group(2)
            code = re.sub(r"\$(\w+)", lambda m: shell_vars.get(m.group(1), m.group(0)), code)
            mentions = _commands(code)
        else:
            if m := re.match(r"(#+) ", line):
                headings = [h for h in headings if h[0] < len(m.group(1))]
                headings.append((len(m.group(1)), tuple(COMMAND.findall(line))))
            mentions = _inline(line, next((verbs for _, verbs in reversed(headings) if verbs), ()))
        yield from ((verbs, flags, n) for verbs, flags in mentions if flags)


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each line, the lines of a prose paragraph
    joined into one (a code span may wrap)."""
    out: list[tuple[int, str]] = []
    para: list[tuple[int, str]] = []
    fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence or line.lstrip().startswith(("```", "#", "|")) or not line.strip():
            if para:
                out.append((para[0][0], " ".join(x.strip() for _, x in para)))
                para = []
            out.append((n, line))
        else:
            para.append((n, line))
    if para:
        out.append((para[0][0], " ".join(x.strip() for _, x in para)))
    return out


def _commands(code: str):
    parts = COMMAND.split(code)  # [before, verb, its text, verb, its text, …]
    for verb, rest in zip(parts[1::2], parts[2::2]):
        yield (verb,), FLAG.findall(rest)


def _inline(line: str, section: tuple[str, ...]):
    for span in re.findall(r"`([^`]*)`", line):
        if COMMAND.search(span):
            yield from _commands(span)
        elif verb := _verb_at_start(span):
            yield (verb,), FLAG.findall(span)
        elif span.startswith("--"):
            yield section, FLAG.findall(span)
        # else: another program, a path, JSON …
    yield section, FLAG.findall(re.sub(r"`[^`]*`", " ", line))  # prose


def test_the_doc_parser_finds_commands_sections_and_other_programs():
    doc = ("# `tension-run fairplay`\n\nUse `--k` and `serve --stop`, not `vllm serve --port 1`.\n```sh\n"
           'M="--model x"\ntension-run score c \\\n  --endings 3 $M\n```\n')
    got = [(verbs, flags) for verbs, flags, _ in doc_mentions(doc)]
    assert got == [(("fairplay",), ["--k"]), (("serve",), ["--stop"]), (("score",), ["--endings", "--model"])]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_flag_in_the_docs_exists_on_its_verb(doc):
    known = {v.name: flags_of(v.name) for v in VERBS}
    bad = []
    for verbs, flags, n in doc_mentions(doc.read_text(encoding="utf-8")):
        if not any(set(flags) <= known[v] for v in (verbs or known)):
            bad.append(f"{doc.name}:{n}: {' '.join(flags)} on {' or '.join(verbs) or 'any verb'}")
    assert not bad, "\n".join(bad)

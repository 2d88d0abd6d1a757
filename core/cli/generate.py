"""`generate`: stories from ideas, with the settings of GenerateConfig."""

from __future__ import annotations

import sys

from tension.core.cli.flags import Verb, add_settings_flags, given
from tension.core.cli.messages import EXIT_FAILED, print_answer_warnings, print_errors, print_stopped
from tension.core.config.generate import GenerateConfig

__all__ = ["VERBS", "cmd_generate"]

ENV = ("environment: the variable --api-key-env names (default OPENAI_API_KEY) holds the API key (sent as a "
       "bearer token, never written to logs, outputs or the cache); XDG_CACHE_HOME moves ~/.cache, which holds "
       "the LMDB cache and the embedded server. OPENAI_BASE_URL names the server when no --base-url is "
       "given (before a running embedded server).")


def cmd_generate(args) -> int:
    """Generate stories from ideas: the paper's pipeline, its ablations, or whodunits.

    The pipeline and its ablations are paper 000 (§4, App. D); whodunits, written
    paragraph by paragraph, paper 003. Modes: vanilla = Step 2 (story) from the
    idea alone; beats = Step 1 (beats from scratch, warmup ablated) → Step 2;
    full = Step 0 (warmup: 7 beats from a reference title or story) → Step 1
    (beats adapted to the idea) → Step 2; whodunit = L paragraphs, the last
    revealing the culprit (fairplay input).
    Settings: defaults (the paper's) < --config file < flags."""
    from tension.core.api.verbs import generate

    summary = generate(args.ideas, out=args.out, config=args.config, **given(args, GenerateConfig)).summary
    print_errors(summary.input_errors)
    for f in summary.failures:
        print(f"error: idea {f.id!r} failed at {f.stage}: {f.error}", file=sys.stderr)
    print_answer_warnings(summary.warnings)
    print(f"{summary.stories} of {summary.ideas} ideas generated ({summary.mode}, model {summary.model}); "
          f"requests sent: {summary.requests.get('generation', 0)}; cache hits: {summary.cache_hits.get('endings', 0)}")
    if summary.status == "failed":
        print_stopped(summary.error, "answers are")
        return EXIT_FAILED
    if not summary.stories:
        print(f"error: no idea could be generated; {summary.out} was not written", file=sys.stderr)
        return summary.exit_status
    print(f"written: {summary.out}")
    if summary.input_errors or summary.failures:
        print(f"{len(summary.input_errors) + len(summary.failures)} ideas failed (see above); "
              "the others were generated", file=sys.stderr)
    return summary.exit_status


def _generate_flags(p) -> None:
    p.add_argument("ideas", metavar="IDEAS",
                   help="JSON Lines (id, idea, group?; whodunit: suspects, culprit, distractor) or a folder of .txt")
    p.add_argument("--out", required=True, metavar="STORIES.jsonl",
                   help="output file: a score corpus (pipeline modes) or fairplay input (whodunit); "
                        "STORIES.run.json beside it records the run")
    p.add_argument("--config", metavar="FILE.toml", help="settings file; its keys are the flags' names")
    add_settings_flags(p, GenerateConfig)


VERBS = [Verb("generate", cmd_generate, _generate_flags, (GenerateConfig,), frozenset({"ideas", "out", "config"}),
              ENV)]

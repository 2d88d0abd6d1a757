"""`audit`: people check a finished score run's judge (issue 60; docs/metrics.md 1.10).

    audit sample RUN_DIR    draw the sample people label (once, seeded) into RUN_DIR/audit/sample.json
    audit label RUN_DIR     serve the view's labelling page for it (drawing the sample first if need be)
    audit export RUN_DIR    the sample as CSV, for a spreadsheet or an annotation tool
    audit import RUN_DIR F  labels back from such a CSV
    audit report RUN_DIR    agreement, κ, sensitivity, specificity, people's agreement, and the group
                            statistics corrected for the judge's errors; writes audit.md, audit.csv
                            and their figure audit.png
"""

from __future__ import annotations

import shlex
import sys

from tension.core.cli.flags import PORT, Number, Verb, count
from tension.core.cli.messages import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

__all__ = ["VERBS", "cmd_audit_sample", "cmd_audit_label", "cmd_audit_export", "cmd_audit_import",
           "cmd_audit_report", "GROUP_HELP"]

GROUP_HELP = "people check a score run's judge: sample its verdicts, label them, and correct the statistics"
DEFAULT_SIZE = 100
DEFAULT_PORT = 8780


def _said_sample(sample, run: str) -> None:
    no = sum(it.judge != "match" for it in sample.items)
    print(f"audit sample of {run}: {len(sample.items)} verdicts ({no} the judge called no, {len(sample.items) - no} "
          f"yes; {sample.shared} shown to every annotator), seed {sample.seed}, drawn {sample.drawn}")
    for n in sample.notes:
        print(f"note: {n}", file=sys.stderr)


def _kept_sample(sample, args) -> None:
    """Say that a sample drawn before is kept when this command's flags asked for another (--size,
    --shared, --seed, as given; None: not given): it is drawn once, and they were left unused without a word."""
    asked = {"--size": args.size, "--seed": args.seed, "--shared": args.shared}
    have = {"--size": sample.size, "--seed": sample.seed, "--shared": sample.shared}
    differ = [f for f, v in asked.items() if v is not None and v != have[f]]
    if not differ:
        return
    flags = " ".join(f"{f} {asked[f]}" for f in asked if asked[f] is not None)
    print(f"note: the run's sample was drawn before ({', '.join(f'{f} {have[f]}' for f in differ)}) and is kept; "
          f"to draw it anew with {', '.join(f'{f} {asked[f]}' for f in differ)} while nobody has labelled it: "
          f"tension-run audit sample {shlex.quote(args.run)} {flags} --redraw", file=sys.stderr)


def cmd_audit_sample(args) -> int:
    """Draw the sample of a finished score run's verdicts that people label (once, seeded).

    Half among the judge's no, half among its yes, spread over stories and the early, middle and late parts;
    a share (--shared) shown to every annotator.

    Drawn once (seeded) into RUN_DIR/audit/sample.json with, per verdict, the story up to the anchor, the
    continuation and the predicted ending the judge saw (read from the run's cache; nothing is sent). Run
    again, it says what is there; --redraw draws anew while nobody has labelled it."""
    from tension.core.api.audit import audit_sample
    from tension.core.inputs.labels import sample_path
    from tension.core.inputs.verdict_counts import sample_mismatch

    kept = sample_path(args.run).is_file() and not args.redraw
    sample = audit_sample(args.run, size=args.size or DEFAULT_SIZE, shared=args.shared, seed=args.seed or 0,
                          cache=args.cache, redraw=args.redraw)
    _said_sample(sample, args.run)
    if kept:
        _kept_sample(sample, args)
    if (why := sample_mismatch(args.run, sample)) is not None:  # a sample kept over a run scored again since
        print(f"error: {why}", file=sys.stderr)
        return EXIT_FAILED
    print(f"label it: tension-run audit label {shlex.quote(args.run)}")
    return EXIT_OK


def cmd_audit_label(args) -> int:
    """Serve the labelling page of a run's audit on 127.0.0.1 and print its URL.

    Each person, by name, says whether each predicted ending matches what happens (keys y / n / s, back with
    b), blind to the judge's answer; every answer is kept at once in RUN_DIR/audit/labels.jsonl.

    Draws the sample first when the run has none (--size, --shared, --seed). The page is the view's (`tension-run
    view RUN_DIR` serves it too); Ctrl-C stops it."""
    from tension.core.api.audit import audit_sample
    from tension.core.errors import status_of
    from tension.core.inputs.labels import read_sample, sample_path
    from tension.core.inputs.verdict_counts import sample_mismatch
    from tension.core.signals import quiet_finalizers

    if not sample_path(args.run).is_file():
        _said_sample(audit_sample(args.run, size=args.size or DEFAULT_SIZE, shared=args.shared, seed=args.seed or 0,
                                  cache=args.cache), args.run)
    elif (why := sample_mismatch(args.run, kept := read_sample(args.run))) is not None:  # labels nothing could use
        print(f"error: {why}", file=sys.stderr)
        return EXIT_FAILED
    else:
        _kept_sample(kept, args)

    def say(message: str) -> None:
        print(message, flush=True)
        if message.startswith("view: "):
            print(f"label: {message.split()[1]}r0/audit.html", flush=True)

    try:
        from tension.core.pipelines.recalls import fairplay_recall, score_recall
        from tension.core.view import view

        view([args.run], host=args.host, port=args.port, cache=args.cache, score_recall=score_recall,
             fairplay_recall=fairplay_recall, say=say)
    except BaseException as e:
        if status_of(e) != EXIT_INTERRUPTED:  # (KeyboardInterrupt, or asyncio's CancelledError)
            raise
        quiet_finalizers()
        print("view stopped (every label given is in the run's audit/labels.jsonl)", file=sys.stderr)
    return EXIT_OK


def cmd_audit_export(args) -> int:
    """Write a run's audit sample as CSV, for a spreadsheet or an annotation tool.

    Columns: key, story, group, k, pct, part, shared, the three texts, then annotator and label to fill in;
    never the judge's answer."""
    from tension.core.api.audit import audit_export

    path = audit_export(args.run, args.csv_out, annotator=args.annotator)
    print(f"written: {path} (fill in `label`: matches, does-not-match or cant-tell; read back with: tension-run "
          f"audit import {shlex.quote(args.run)} {shlex.quote(str(path))})")
    return EXIT_OK


def cmd_audit_import(args) -> int:
    """Read labels back from a CSV into the run's audit.

    Columns key, label and annotator, as `audit export` writes them; into RUN_DIR/audit/labels.jsonl.
    A bad row (a key not in the sample, another label value, no annotator, a
    second label of a key by the same person) is an error naming its line and column and is not imported;
    the good rows are; a row already there as it is is skipped, and so is a row this file gave before that the
    person has changed since (in the labelling page), so importing a file twice adds and undoes nothing."""
    from tension.core.api.audit import audit_import

    r = audit_import(args.run, args.csv, annotator=args.annotator)
    for e in r.errors:
        print(f"error: {e}", file=sys.stderr)
    if r.superseded:
        print(f"note: {r.superseded} row(s) this file gave before were changed since by the same person (in the "
              "labelling page or another file): the later label kept", file=sys.stderr)
    if r.errors and not r.bad_rows:  # the file's own error: no row was read, none is "bad"
        print(f"nothing imported: {args.csv} could not be read (above)")
        return EXIT_FAILED
    print(f"imported {r.added} label(s) into {r.labels_file}; {r.unchanged} already there, {r.blank} row(s) without "
          f"a label" + (f"; {r.bad_rows} bad row(s) not imported (fix them and import the file again)"
                        if r.errors else ""))
    return EXIT_FAILED if r.errors else EXIT_OK


def cmd_audit_report(args) -> int:
    """The audit of a run's judge: its agreement with people, and the statistics corrected for its errors.

    Agreement of judge and people, Cohen's κ, the judge's sensitivity and specificity (95% Wilson–MOVER
    intervals; docs/metrics.md 1.10), people's agreement on shared items, all by story
    group and part; then mean and late NR per group corrected for the judge's errors beside the uncorrected
    values, and a warning when agreement is too low. Writes RUN_DIR/audit.md, RUN_DIR/audit.csv and their
    figure RUN_DIR/audit.png (the corrected statistics beside the uncorrected, sensitivity and specificity
    by part and group), together."""
    from tension.core.api.audit import audit
    from tension.core.reports.audit_report import audit_text

    r = audit(args.run, resamples=args.resamples, seed=args.seed)
    print(audit_text(r), end="")
    for w in r.warnings:
        print(f"warning: {w}", file=sys.stderr)
    for e in r.errors:
        print(f"error: {e}", file=sys.stderr)
    print(f"written: {args.run}/audit.md, {args.run}/audit.csv, {args.run}/{r.figure}")
    return EXIT_FAILED if r.errors else EXIT_OK


def _run(p) -> None:
    p.add_argument("run", metavar="RUN_DIR", help="the --out folder of a finished score run")


def _sample_flags(p, *, cache: bool = True) -> None:
    g = p.add_argument_group("the sample (drawn once)")
    # None when not given: a sample drawn before is kept, and only flags the user gave are said unused
    g.add_argument("--size", type=count(2, 100_000), default=None,
                   help="verdicts in the sample, half among the judge's no and half among its yes (default: "
                        f"{DEFAULT_SIZE})")
    g.add_argument("--shared", type=count(0, 100_000), default=None,
                   help="of them, shown to every annotator for agreement between people (default: a fifth)")
    g.add_argument("--seed", type=count(0), default=None, help="seed of the draw (default: 0)")
    if cache:
        g.add_argument("--cache", metavar="PATH", help="the LMDB cache holding the run's endings and verdicts "
                                                       "(default: the one run.json names)")


def _sample_verb_flags(p) -> None:
    _run(p)
    _sample_flags(p)
    p.add_argument("--redraw", action="store_true", help="draw anew (refused once anything is labelled)")


def _label_flags(p) -> None:
    _run(p)
    p.add_argument("--port", type=Number(int, PORT), default=DEFAULT_PORT,
                   help="port to serve on (default: %(default)s; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)")
    _sample_flags(p)


def _export_flags(p) -> None:
    _run(p)
    p.add_argument("--out", dest="csv_out", metavar="CSV", required=True, help="the CSV file to write")
    p.add_argument("--annotator", metavar="NAME", help="fill in this person's labels so far")


def _import_flags(p) -> None:
    _run(p)
    p.add_argument("csv", metavar="CSV", help="a CSV (or TSV) with the columns key, label and annotator")
    p.add_argument("--annotator", metavar="NAME", help="who labelled the rows that name nobody")


def _report_flags(p) -> None:
    _run(p)
    p.add_argument("--resamples", type=count(100, 1_000_000), default=2000,
                   help="bootstrap resamples of an uncorrected group mean's interval where groups.csv has "
                        "none (default: %(default)s)")
    p.add_argument("--seed", type=count(0), default=0, help="bootstrap seed (default: %(default)s)")


VERBS = [
    Verb("audit sample", cmd_audit_sample, _sample_verb_flags, (),
         frozenset({"run", "size", "shared", "seed", "cache", "redraw"})),
    Verb("audit label", cmd_audit_label, _label_flags, (),
         frozenset({"run", "port", "host", "size", "shared", "seed", "cache"})),
    Verb("audit export", cmd_audit_export, _export_flags, (), frozenset({"run", "csv_out", "annotator"})),
    Verb("audit import", cmd_audit_import, _import_flags, (), frozenset({"run", "csv", "annotator"})),
    Verb("audit report", cmd_audit_report, _report_flags, (), frozenset({"run", "resamples", "seed"})),
]

"""`cache drop`: forget the cached answers a broken setup left (by the model asked
for, the role, or the run folder whose positions they scored), so the next run asks
for them again; it counts what goes, and drops only with --yes."""

from __future__ import annotations

import sys
from pathlib import Path

from tension.core.cli.cache_given import existing, given_cache
from tension.core.cli.messages import EXIT_OK
from tension.core.errors import ConfigError

__all__ = ["cmd_cache_drop", "drop_flags", "ROLE_DBS"]

# `cache drop --role`: the databases holding a role's answers ("positions" holds a
# judged position's verdicts as one record, an index rebuilt from the verdict
# records without a request)
ROLE_DBS = {"generation": ("endings",), "judge": ("verdicts", "positions"), "tokenize": ("tokens",)}
WHAT = {"endings": "endings records (generation)", "verdicts": "verdict records (judge)",
        "positions": "judged-position records (judge; an index of the verdicts, rebuilt from them with no request)",
        "tokens": "token counts (tokenize)"}


def cmd_cache_drop(args) -> int:
    """Forget cached answers, so the next run asks for them again: those of a model
    (--model: the requests that asked for it, whatever name the server answered
    under), of a role (--role), of a run folder (--run:
    the records its positions were scored from), or of all the filters given.

    The cache is PATH (or --cache PATH); with --run DIR and neither, the one DIR's
    run.json names (the cache the run used), else the default. Without --yes it
    only counts what would go (a dry run). Records are only
    deleted, never changed; the next run asks again for what it needs of them and
    writes the new answers. A broken setup's answers (a judge whose reasoning was
    on, endings that came back empty) are otherwise replayed by every rerun;
    `score --refresh ROLE` asks them again in place instead."""
    from tension.cache.store import DBS, Store, default_path
    from tension.core.pipelines.score.recall import recorded_cache

    if args.model is None and args.role is None and args.run is None:
        raise ConfigError("cache drop: name what to drop with --model, --role or --run (they combine)")
    given = given_cache(args, "cache drop")
    if given is None and args.run is not None and (recorded := recorded_cache(Path(args.run))) is not None:
        # the cache the run used, which its run.json names: the one holding its records
        print(f"cache {recorded}: the one {Path(args.run) / 'run.json'} names (--cache gives another)")
        given = str(recorded)
    path = existing(given or default_path())
    dbs = ROLE_DBS[args.role] if args.role else DBS
    with Store(path) as store:
        run = None
        if args.run is not None:
            from tension.core.pipelines.score.recall import run_keys

            run = run_keys(Path(args.run), store)
            if run.note:
                print(f"note: {run.note}", file=sys.stderr)
            if "verdicts" in dbs:
                _say_verdicts_out_of_reach(store, run.keys["endings"])
        chosen: dict[str, list[bytes]] = {}
        by_answer = 0  # records written before issue 58, matched by the model that answered
        unnamed: list[bytes] = []  # judged-position records written before issue 58 (they name no model)
        for db in dbs:
            if run is not None and db not in run.keys:
                continue  # token counts are not a run's own
            wanted = run.keys[db] if run is not None else None
            chosen[db] = []
            for key, rec in store.keys(db):
                if wanted is not None and key not in wanted:
                    continue
                match = _model_matches(rec, args.model)
                if match is None:
                    unnamed.append(key)
                elif match:
                    chosen[db].append(key)
                    by_answer += args.model is not None and not getattr(rec, "asked", "x")  # (token counts: none)
        if unnamed and chosen.get("verdicts"):
            # an index of verdicts that names no model: it goes with the verdicts dropped (else a
            # rerun would read their answers from it); without one it is rebuilt with no request
            chosen["positions"] += unnamed
        total = sum(len(k) for k in chosen.values())
        which = ", ".join(f"{k} {v}" for k, v in (("model", args.model), ("role", args.role), ("run", args.run)) if v)
        print(f"cache {path}: {total} records match ({which})" + (":" if total else ""))
        for db, keys in chosen.items():
            if keys:
                print(f"  {len(keys):>8} {WHAT[db]}")
        if by_answer:
            print(f"note: {by_answer} of them were written before records named the model asked for: they are "
                  f"matched by the model that answered ({args.model})")
        if unnamed and chosen.get("verdicts"):
            print(f"note: {len(unnamed)} of the judged-position records name no model (written before records "
                  "named it): they go with the verdicts dropped, and a run rebuilds those it needs from the "
                  "verdicts kept, with no request")
        if not total:
            return EXIT_OK
        if not args.yes:
            print("nothing dropped (a dry run): add --yes to drop them")
            return EXIT_OK
        gone = sum(store.delete_many((db, key) for db, keys in chosen.items() for key in keys).values())
    print(f"dropped {gone} records from {path}; the next run asks again for those it needs"
          + (f" ({total - gone} of the {total} were gone already: another process dropped them)"
             if gone < total else ""))
    return EXIT_OK


def _say_verdicts_out_of_reach(store, endings: set[bytes]) -> None:
    """Say how many of the run's endings records are not in the cache (a drop of
    them before): a verdict's key is made of its ending's text, so their verdicts
    cannot be found, and stay; a rerun makes the same seeded endings and reads them."""
    keys = sorted(endings)
    gone = sum(rec is None for rec in store.get_many("endings", keys)) if keys else 0
    if gone:
        print(f"note: {gone} of the run's endings records are not in the cache (dropped before?): the verdicts of "
              "their endings cannot be found from the run, and stay; a rerun that makes the same endings again reads "
              "them. `score --refresh judge` asks the judge again in place", file=sys.stderr)


def _model_matches(rec, model: str | None) -> bool | None:
    """Whether a record answers a request that asked for `model` (its `asked`; a
    server may answer under another name, which is `model` of the record). A record
    written before records named it: the model that answered (token counts name the
    model asked for); None for a judged-position record that names no model."""
    from tension.cache.records import JudgedPosition

    if model is None:
        return True
    asked = getattr(rec, "asked", "")
    if asked:
        return asked == model
    if isinstance(rec, JudgedPosition):
        return None
    return getattr(rec, "model", None) == model


def drop_flags(p) -> None:
    p.add_argument("path", nargs="?", metavar="PATH",
                   help="LMDB cache folder (default: the one --run DIR's run.json names, else "
                        "~/.cache/tension-run/llm.lmdb); --cache PATH says the same")
    p.add_argument("--cache", metavar="PATH", help="LMDB cache folder (the same as PATH)")
    p.add_argument("--model", metavar="MODEL", help="the records of the requests that asked for this model (a server "
                        "answering under another name does not change them)")
    p.add_argument("--role", choices=tuple(ROLE_DBS),
                   help="the records of this role: generation (endings), judge (verdicts), tokenize (token counts)")
    p.add_argument("--run", metavar="DIR", help="the records a score run folder's positions were scored from "
                                                "(positions.jsonl, or positions.partial.jsonl of a stopped run)")
    p.add_argument("--yes", action="store_true", help="drop them (without it: only count them)")

"""A constraint a server refuses, left out where the answers mean the same without it
(issue 61 M2; docs/servers.md "Fields a server refuses or drops").

`--judge-constraint choice` and `--reader-constraint json` go as vLLM's
`structured_outputs`, a field OpenAI's API does not have; transformers serve answers
HTTP 422 "Unexpected fields in the request: {'structured_outputs'}" to it. The
papers' own judge and readers were not constrained: the judge answered freely and
its verdict is the first character of the answer (000 App. C.5: Y is a match,
anything else is not), the readers gave a JSON dictionary in free text (003), and
the tool reads unconstrained answers exactly so (core/prompts/score.py
`parse_verdict`; core/prompts/answers.py `parse_distribution`, an unusable answer
asked again up to --parse-retries, never filled in). Without the constraint the
run therefore measures what the paper measured; what the constraint only helped
(a weak model's answer format) the malformed-answer checks still watch
(docs/reliability.md, "Degenerate answers"). So the run falls back by default,
rather than stopping: it says so once, and the run record keeps the constraint
used (run.json `judge_constraint_used`, fairplay_run.json `reader_constraint_used`).

The requests then are built without the constraint, so their cache keys are the
unconstrained requests' own: a run given the constraint `none` reads the same
answers, and no answer is ever kept under a constraint it was not given. A server
that refused the field keeps it on its record, and the cache keeps that for the
next run (core/run/taught.py): a later run on the same server falls back before its
first request instead of sending a refused one again.

Log-probabilities a server drops (`--judge-constraint logprobs`) have no such
fallback: a verdict read from them is another measurement than the paper's free
answer, so that run is refused, naming the flag (core/llm/refusals.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tension.core.llm.refusals import FieldRefusedError
from tension.core.llm.servers import Server

__all__ = ["Unconstrained", "FIELD", "JUDGE_PARSE", "READER_PARSE"]

FIELD = "structured_outputs"  # vLLM's form of a constraint, as the cache key holds it
UNSENT = ("none", "logprobs")  # constraint settings that send no FIELD
JUDGE_PARSE = ("the paper's judge: free answers, the verdict read from the first character (Y: a match; anything "
               "else, no match); the malformed-answer checks say if the judge does not answer Y or N")
READER_PARSE = ("the paper's readers: free answers, the JSON dictionary read from the text, an unusable answer "
                "asked again (--parse-retries) and never filled in")


class Unconstrained:
    """One constraint flag of a run (`flag` given as `asked`): sent while its servers
    take it; from the first refusal of `FIELD` on (a 422 in this run, or an earlier
    run's kept in the cache), the run's requests go without it (`used` "none"), said
    once through `say`."""

    def __init__(self, flag: str, asked: str, parse: str, record: str, say: Callable[[str], None]):
        self.flag = flag
        self.asked = asked
        self.used = asked  # the constraint the requests carry now
        self.parse = parse  # what the answers are read as without it
        self.record = record  # where the run record keeps `used`
        self.say = say

    @property
    def constrained(self) -> bool:
        """Whether the requests carry vLLM's constraint (a JSON schema or a choice)."""
        return self.used not in UNSENT

    def refused(self, e: BaseException) -> bool:
        """Whether `e` is a server refusing the constraint: then the requests go without
        it from now on (said once) and the caller asks again; False for anything else."""
        if not (isinstance(e, FieldRefusedError) and not e.dropped and FIELD in e.fields) or self.asked in UNSENT:
            return False  # (a constraint never sent as FIELD: the error is another's, and asking again cannot help)
        if self.constrained:  # else another request, built before the first refusal, was refused too
            self._fall(f"{e.server} does not take vLLM's {FIELD} (HTTP {e.status})")
        return True

    def known(self, servers: Iterable[Server]) -> None:
        """Before a request is built: one of `servers` is known to refuse the constraint
        (an earlier run's 422, kept in the cache; or this run's), so it is not sent."""
        if not self.constrained:
            return
        for s in servers:
            if FIELD in s.refuses:
                self._fall(f"{s.name} does not take vLLM's {FIELD} (it refused an earlier run's request; the "
                           "cache keeps that)")
                return

    def _fall(self, why: str) -> None:
        self.used = "none"
        self.say(f"{why}: {self.flag} {self.asked} falls back to {self.flag} none, {self.parse}; the answers are "
                 f"cached as the unconstrained requests', and {self.record} says so (docs/servers.md, "
                 "\"Fields a server refuses or drops\")")

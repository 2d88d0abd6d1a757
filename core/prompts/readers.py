"""The readers' prompts, as templates (paper 003, SI; docs/fairplay.md, "The readers").

- `GULLIBLE`: the paper's gullible-reader prompt, verbatim except that "four" and
  the A–D example follow the story's number of suspects (for four they are the
  paper's words exactly).
- `EXPERIENCED`: the paper's experienced-reader prompt; the block of previous
  stories (and the sentence announcing it) is left out when there are none. The
  SI's stray "I" before "Note" is dropped and `num_paragraphs` is the story's L.
- The know-it-all reader continues a story with the *generator's own* prompts (the
  `generator` record of the story), rendered by `render_generator`.
- `CULPRIT_SYSTEM` / `CULPRIT_USER`: **ours**, not the paper's (the paper names no
  judge prompt): which suspect a finished continuation reveals as the culprit.
- `EXTRACT_SYSTEM` / `EXTRACT_USER`: **ours**: the suspects of a story that comes
  without a list.

Templates are filled by literal replacement in one pass (`fill`), never by
str.format: story texts contain braces, and a placeholder inside an inserted text
is left alone. Changing a character here changes the cache keys of every request
that uses it, so a changed prompt is never served an old answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from tension.core.prompts.fill import fill, render_whodunit, story_join, suspect_list

__all__ = [
    "GULLIBLE", "EXPERIENCED", "PREVIOUS_BLOCK", "CULPRIT_SYSTEM", "CULPRIT_USER", "EXTRACT_SYSTEM",
    "EXTRACT_USER", "BLIND_CULPRIT", "BLIND_DISTRACTOR", "fill", "render_generator",
    "gullible_messages", "experienced_messages", "culprit_messages", "extract_messages", "story_join",
]

_COUNT_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine",
                10: "ten"}

_HEAD = (
    "I want you to give me likelihood estimates for the true and distracting culprit identities in the "
    "following story.\n"
    "I want lists of {count} prediction probabilities, a value for each of {count} suspects (representing "
    "the likelihood that the suspect is the true or distracting culprit). Even if a suspect is completely "
    "ruled out, he should still be included (and assigned a low probability).\n"
    "Give me a JSON dictionary with the probabilities. Make sure to follow the exact format in the example. "
    "Give me only the JSON. Do not put comments in the JSON.\n"
    "The suspects are: {suspects}. Please do not change the identity and order of suspects.\n"
    "For example, if it\u2019s clear that A is the distracting culprit and B is the most likely true culprit, "
    "then return something like:\n"
    "```json\n"
    "{example}\n"
    "```"
)

GULLIBLE = (
    _HEAD + " I want you to give probability estimations as if the events in the story are real, ignoring "
    "the interest of the writer. You should estimate the most likely truth, even if is boring. The story is:\n"
    "## BEGINNING OF STORY ##\n"
    "\n"
    "{story}\n"
    "\n"
    "## END OF STORY ##"
)

EXPERIENCED = (
    _HEAD + " I want you to give probability estimations for what will be revealed (or was already revealed) "
    "at the end of story. That is, the probability for each culprit is the probability that the story will be "
    "continued in way that ends up with this character being the culprit.\n"
    "Note that the story is generated paragraph by paragraph by a language model, for a total of {L} "
    "paragraphs.\n"
    "The generating model is instructed to introduce at least four characters, one of which is the true "
    "culprit and one is a distractor.\n"
    "The clues are instructed to be misleading and point to the distracting character until the end of the "
    "story when the truth is discovered. Try your best to deduce the culprit\u2019s identity. Use any knowledge "
    "at your disposal, including previous stories you\u2019ve seen.{previous}\n"
    "\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014\u2014 Now I\u2019ll "
    "give you the (possibly partial) story for which you must predict the culprit. The story is:\n"
    "## BEGINNING OF (PARTIAL) STORY FOR PREDICTION ##\n"
    "\n"
    "{story}\n"
    "## END OF (PARTIAL) STORY FOR PREDICTION ##"
)

PREVIOUS_BLOCK = (
    " I\u2019m also giving you some previous full stories written by this model. Use them to deduce the "
    "culprit\u2019s identity if relevant.\n"
    "\n"
    "#######################\n"
    "## PREVIOUS STORIES ##\n"
    "{stories}\n"
    "## END OF PREVIOUS STORIES ##\n"
    "#############################"
)

_PREVIOUS_ONE = "\n## BEGINNING OF PREVIOUS STORY {n}##\n\n{story}\n\n## END OF PREVIOUS STORY {n}##\n"

CULPRIT_SYSTEM = "You are a careful reader of detective stories. You answer only with JSON."

def _story_block(heading: str) -> str:
    """A heading, then the story between the markers the readers' prompts use."""
    return heading + "\n## BEGINNING OF STORY ##\n\n{story}\n\n## END OF STORY ##\n\n"


CULPRIT_USER = (
    _story_block("Here is a finished detective story.") +
    "The suspects are: {suspects}. Which of them does the story reveal at its end as the true culprit? "
    "Answer with the JSON object {\"culprit\": \"NAME\"}, NAME written exactly as in the list of suspects. "
    "If the story reveals none of them as the culprit, answer {\"culprit\": null}."
)

EXTRACT_SYSTEM = "You are a careful reader of detective stories. You answer only with JSON."

EXTRACT_USER = (
    _story_block("Here is the beginning of a detective story.") +
    "List the suspects: the characters this story presents as possibly guilty of its crime, the most "
    "prominent first, at most {max} of them. Answer with the JSON object {\"suspects\": [\"NAME\", ...]}, each "
    "name as the story writes it."
)

# In "blind" mode the know-it-all's continuations are not told the true culprit
# (see docs/fairplay.md): these stand in for {culprit} and {distractor}.
BLIND_CULPRIT = "the suspect the story so far has set up to be the culprit"
BLIND_DISTRACTOR = "the suspect the story so far has set up to be the distractor"


def render_generator(template: str, *, i: int, L: int, suspects: Sequence[str], culprit: str,
                     distractor: str | None, story: Sequence[str]) -> str:
    """A generator prompt with its literal placeholders ``{i} {L} {suspects}
    {culprit} {distractor} {story}`` filled: suspects comma-separated, the story so
    far as `story_join` of the paragraphs before paragraph i."""
    # generate's own renderer: the know-it-all continues exactly as the story was written
    return render_whodunit(template, i=i, L=L, suspects=suspects, culprit=culprit,
                           distractor=distractor or "", story=story_join(story))


def _example(n: int) -> str:
    """The paper's example for n = 4 (A the distractor, B the likely culprit); the
    same pattern for other counts."""
    letters = [chr(ord("A") + j) for j in range(n)]
    if n == 4:
        probs = "[0.0, 0.9, 0.05, 0.05]"
    elif n == 2:
        probs = "[0.1, 0.9]"
    else:
        rest = round(0.1 / (n - 2), 4)
        probs = "[" + ", ".join(["0.0", "0.9"] + [f"{rest:g}"] * (n - 2)) + "]"
    dist = "[" + ", ".join(["1.0"] + ["0.0"] * (n - 1)) + "]"
    names = "[" + ", ".join(f'"{x}"' for x in letters) + "]"
    return f'{{\n"suspects": {names},\n"probabilities": {probs},\n"distractor_probabilities": {dist}\n}}'


def _head_values(suspects: Sequence[str]) -> dict[str, object]:
    n = len(suspects)
    return {"count": _COUNT_WORDS.get(n, str(n)), "suspects": suspect_list(suspects), "example": _example(n)}


def gullible_messages(prefix: Sequence[str], suspects: Sequence[str]) -> list[dict[str, str]]:
    """The gullible reader after the paragraphs `prefix`."""
    return [{"role": "user", "content": fill(GULLIBLE, {**_head_values(suspects), "story": story_join(prefix)})}]


def experienced_messages(prefix: Sequence[str], suspects: Sequence[str], L: int,
                         previous: Sequence[str] = ()) -> list[dict[str, str]]:
    """The experienced reader after `prefix`, knowing `previous` full stories of the
    same generator (oldest first)."""
    block = ""
    if previous:
        stories = "".join(fill(_PREVIOUS_ONE, {"n": n, "story": s}) for n, s in enumerate(previous, 1))
        block = fill(PREVIOUS_BLOCK, {"stories": stories})
    values = {**_head_values(suspects), "L": L, "previous": block, "story": story_join(prefix)}
    return [{"role": "user", "content": fill(EXPERIENCED, values)}]


def culprit_messages(story: Sequence[str], suspects: Sequence[str]) -> list[dict[str, str]]:
    """Our judge: the culprit a finished (continued) story reveals."""
    user = fill(CULPRIT_USER, {"story": story_join(story), "suspects": suspect_list(suspects)})
    return [{"role": "system", "content": CULPRIT_SYSTEM}, {"role": "user", "content": user}]


def extract_messages(text: str, max_suspects: int) -> list[dict[str, str]]:
    """Ours: the suspects of a story given without a list."""
    user = fill(EXTRACT_USER, {"story": text, "max": max_suspects})
    return [{"role": "system", "content": EXTRACT_SYSTEM}, {"role": "user", "content": user}]

"""The prompts of `generate` (paper 000, App. D.4; paper 003, SI), as templates.

Where the papers print a prompt, the text here is the printed one, verbatim, with
its LaTeX rendered (`---` → em dash). Where they describe a prompt without printing
it, the text is ours and says so (`OURS`): the from-scratch beat prompt (warmup
ablated), the vanilla story prompt, and the whodunit's final-paragraph prompt.
Changing any character here changes the cache keys of the requests that use it.

Story pipeline templates use `str.format` fields (the paper's `{ref_name}`,
`{warmup output}` … spelled as identifiers). The whodunit templates are rendered
with `render_whodunit`, by literal replacement of `{i}`, `{L}`, `{suspects}`,
`{culprit}`, `{distractor}` and `{story}` in one pass — story texts contain braces,
so `str.format` cannot be used, and another program (the know-it-all reader of
`fairplay`) must reproduce the exact prompt from the stored templates.
"""

from __future__ import annotations

from tension.core.prompts.fill import render_whodunit

__all__ = [
    "PAPER_TITLES", "RECOMMENDED_TITLES", "WARMUP_TITLE", "WARMUP_TEXT", "ADAPT_WITH_WARMUP",
    "ADAPT_FROM_SCRATCH", "BEATS_CONSTRAINT", "WRITE_WITH_BEATS", "WRITE_VANILLA",
    "WHODUNIT_SYSTEM", "WHODUNIT_PARAGRAPH", "WHODUNIT_FINAL", "render_whodunit",
]

# Step 0, title mode: the paper's pool (App. D.4.1) and the 20 it recommends.
# An entry is sent as the `{ref_name}` exactly as printed ("Title — Author").
PAPER_TITLES = (
    "The Ones Who Walk Away from Omelas \u2014 Ursula K. Le Guin",
    "The Lottery \u2014 Shirley Jackson",
    "The Yellow Wallpaper \u2014 Charlotte Perkins Gilman",
)
RECOMMENDED_TITLES = PAPER_TITLES + (
    "Hills Like White Elephants \u2014 Ernest Hemingway",
    "A Good Man Is Hard to Find \u2014 Flannery O\u2019Connor",
    "The Garden of Forking Paths \u2014 Jorge Luis Borges",
    "The Metamorphosis \u2014 Franz Kafka",
    "Rash\u014dmon \u2014 Ry\u016bnosuke Akutagawa",
    "The Necklace \u2014 Guy de Maupassant",
    "The Overcoat \u2014 Nikolai Gogol",
    "Girl \u2014 Jamaica Kincaid",
    "Axolotl \u2014 Julio Cort\u00e1zar",
    "Cathedral \u2014 Raymond Carver",
    "The Lady with the Dog \u2014 Anton Chekhov",
    "Araby \u2014 James Joyce",
    "A Very Old Man with Enormous Wings \u2014 Gabriel Garc\u00eda M\u00e1rquez",
    "Sonny\u2019s Blues \u2014 James Baldwin",
    "The Fifth Story \u2014 Clarice Lispector",
    "A Madman\u2019s Diary \u2014 Lu Xun",
    "The Bear Came Over the Mountain \u2014 Alice Munro",
)

_EXTRACT = (
    "extract 7 scene-level beats. For each beat describe: (1) the concrete action, (2) the specific "
    "narrative technique used, and (3) identify what made it memorable. What narrative trick, thematic "
    "resonance, or structural choice made each story work?"
)

# Step 0, title mode (style c1_specific).
WARMUP_TITLE = 'Using "{ref_name}" as your reference, ' + _EXTRACT

# Step 0, full-text mode.
WARMUP_TEXT = (
    "Here is a short story:\n"
    "\n"
    "\u2014\n"
    "{story}\n"
    "\u2014\n"
    "\n"
    "Using this story as your reference, " + _EXTRACT
)

# Step 1 after a warmup (App. D.4.2).
ADAPT_WITH_WARMUP = (
    "Here is a structural beat sheet extracted from a reference story:\n"
    "\n"
    "\u2014\n"
    "{warmup}\n"
    "\u2014\n"
    "\n"
    "Using the above as a template, create an adapted to-do list of the most important structural beats "
    "needed to tell THIS story:\n"
    "\n"
    "{idea}{beats_constraint}"
)

# Step 1 with the warmup ablated. OURS: the paper says only that the beats are then
# "generated from scratch, prompted with the story idea alone"; this is the printed
# prompt without the reference part.
ADAPT_FROM_SCRATCH = (
    "Create a to-do list of the most important structural beats needed to tell THIS story:\n"
    "\n"
    "{idea}{beats_constraint}"
)

# The optional suffix of Step 1; the paper prints it without its separator.
BEATS_CONSTRAINT = "\n\nLimit to exactly {n} beats."

# Step 2 with beats (App. D.4.3).
WRITE_WITH_BEATS = (
    "Here is a structural to-do list for a short story:\n"
    "\n"
    "\u2014\n"
    "{beats}\n"
    "\u2014\n"
    "\n"
    "Write the story now. Follow the structural beats closely. Write only the story \u2014 no commentary."
)

# Step 2 alone (vanilla). OURS: the paper does not print its single-shot prompt;
# this is the printed Step 2 prompt with the idea in place of the to-do list.
WRITE_VANILLA = (
    "Here is the idea for a short story:\n"
    "\n"
    "\u2014\n"
    "{idea}\n"
    "\u2014\n"
    "\n"
    "Write the story now. Write only the story \u2014 no commentary."
)

# --- whodunits (paper 003, SI "generation prompts") -------------------------------

WHODUNIT_SYSTEM = (
    "You are a skilled author of detective fiction. Your task is to write a whodunit mystery story, "
    "paragraph by paragraph. The story must have: (1) a clear culprit who committed the crime; (2) a "
    "prominent distractor\u2014a character who is made to look guilty through misdirection but is "
    "ultimately innocent; (3) clues scattered throughout the story that, in retrospect, point to the true "
    "culprit; (4) a revelation at the end that names the true culprit. The story should be fair play: all "
    "the information needed to solve the mystery should be present in the story, but arranged so that a "
    "careful reader can solve it while a naive reader is misled. Make the story logical and coherent, so it "
    "makes full sense after the revelation."
)

# The paper prints the story part as "[Previous paragraphs: {story so far}]"; the
# brackets mark the inserted text, which we put on its own lines.
WHODUNIT_PARAGRAPH = (
    "Continue the story. Write the next paragraph (paragraph {i} of {L}). The suspects are: {suspects}. "
    "The true culprit is: {culprit} (do not reveal this yet). The distractor is: {distractor} (do not "
    "reveal their innocence yet). Keep the story consistent with what has been written. This is paragraph "
    "{i} of a {L}-paragraph story.\n"
    "\n"
    "Previous paragraphs:\n"
    "{story}"
)

# OURS: the paper says only that paragraph L "uses a modified prompt instructing the
# model to reveal the culprit and provide an explanation of the clues".
WHODUNIT_FINAL = (
    "Finish the story. Write the final paragraph (paragraph {i} of {L}). The suspects are: {suspects}. "
    "The true culprit is: {culprit}. The distractor is: {distractor}. In this paragraph, reveal that "
    "{culprit} is the culprit, explain how the clues in the story point to {culprit}, and make clear that "
    "{distractor} is innocent. Keep the story consistent with what has been written. This is the last "
    "paragraph of a {L}-paragraph story.\n"
    "\n"
    "Previous paragraphs:\n"
    "{story}"
)

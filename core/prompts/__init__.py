"""Every text sent to a model (the papers' prompts, as templates) and the parsers of its
answers."""

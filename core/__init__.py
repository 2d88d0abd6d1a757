"""tension-run core, in layers (docs/architecture.md): cli → pipelines → run, llm, prompts,
inputs, reports, serving, config → errors, formats."""

"""The jobs that call LLMs, each running inside one `run.lifecycle.Run`: score, estimate,
bench, generate, fairplay."""

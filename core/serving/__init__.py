"""Starting LLM servers: the embedded CPU vLLM server (installed once, in its own
environment) and the paper's GPU profiles."""

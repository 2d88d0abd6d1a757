"""tension-run core: corpus, segmentation, prompts, client, scheduler, pipelines, CLI."""

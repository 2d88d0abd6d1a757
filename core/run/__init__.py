"""The life of one pipeline run: the scheduler (the one owner of tasks), group commit,
progress bar, run record. Knows nothing about stories."""

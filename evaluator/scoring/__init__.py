"""Restoring one checkpoint and scoring its captions (loss, perplexity, the COCO metrics)."""

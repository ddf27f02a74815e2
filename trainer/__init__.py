"""The trainer service: training loop, checkpoint schedule, summaries, CLI."""

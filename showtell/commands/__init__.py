"""Command-line entry points that belong to no service: ``showtell data``, ``caption``, ``metrics``.

The services' own entry points are ``showtell.trainer.cli`` and ``showtell.evaluator.cli``.
"""

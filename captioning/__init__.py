"""Shared core of showtell: config, vocabulary, data, model, inference, metrics.

Both services (``trainer`` and ``evaluator``) import this package; it imports neither.
"""

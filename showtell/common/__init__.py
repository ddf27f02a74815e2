"""The bottom layer: the error hierarchy, command-line plumbing and small file helpers.

Imports nothing else of showtell, so every other layer may import it.
"""

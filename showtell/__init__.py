"""showtell: Show-and-Tell captioning as a trainer service and an evaluator service.

Everything installs under this one name: ``showtell.trainer``, ``showtell.evaluator`` and
``showtell.captioning`` (mapped from the repository's ``trainer/``, ``evaluator/`` and
``captioning/`` folders), the contract (``showtell.v1``, ``showtell.api``), the shared bottom
(``showtell.common``) and the command line on top (``showtell.cli``, ``showtell.commands``: every
command's parser and entry point).  ``tests/test_layers.py`` keeps the imports pointing down.
"""

"""Every ``showtell`` command's parser and entry point, one module each: ``data``, ``pretrain``,
``train``, ``evaluate``, ``metrics``, ``runs``, ``caption``, ``import-im2txt`` and ``demo``.  Each
parses its flags into a typed configuration and hands it to a library's assembly
(``showtell.trainer.assembly``, ``showtell.evaluator.daemon``); the libraries have no argparse.
"""

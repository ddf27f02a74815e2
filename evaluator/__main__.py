"""``python -m evaluator`` — the same as ``showtell evaluate``."""

from evaluator.cli import main

raise SystemExit(main())

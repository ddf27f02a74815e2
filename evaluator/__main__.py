"""``python -m showtell.evaluator`` — the same as ``showtell evaluate``."""

from showtell.evaluator.cli import main

raise SystemExit(main())

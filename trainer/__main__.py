"""``python -m showtell.trainer`` — the same as ``showtell train``."""

from showtell.trainer.cli import main

raise SystemExit(main())

"""``python -m trainer`` — the same as ``showtell train``."""

from trainer.cli import main

raise SystemExit(main())

from showtell.cli import main

raise SystemExit(main())

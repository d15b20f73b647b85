from loopdeck.cli import main

raise SystemExit(main())

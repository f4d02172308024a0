from skilld.cli import main

raise SystemExit(main())

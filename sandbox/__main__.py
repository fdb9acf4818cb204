from sandbox.cli.main import main

raise SystemExit(main())

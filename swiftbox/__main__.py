from swiftbox.cli import main

raise SystemExit(main())

from lsp_server.cli import main

raise SystemExit(main())

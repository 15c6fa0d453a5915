"""``python -m codespec`` runs the command line."""

from .cli import main

raise SystemExit(main())

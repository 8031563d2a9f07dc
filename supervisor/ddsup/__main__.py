"""``python -m ddsup`` runs the command line, exactly like the ``ddsup`` script."""

from ddsup._cli import main

raise SystemExit(main())

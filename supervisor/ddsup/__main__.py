"""``python -m ddsup`` runs the command line, exactly like the ``ddsup`` script.

Except the node agent's command line, ``python -m ddsup agent …`` (``ddsup start`` spawns
one per node: ``run/_launcher.py``): that goes to the agent's own entry, which reads its
three options by hand instead of importing ``_cli`` and argparse (``run/_agent_command``).
"""

import sys

if sys.argv[1:2] == ["agent"]:
    from ddsup.run._agent_command import agent_main

    raise SystemExit(agent_main(sys.argv[2:]))

from ddsup._cli import main

raise SystemExit(main())

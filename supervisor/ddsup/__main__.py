"""``python -m ddsup`` runs the command line, exactly like the ``ddsup`` script.

Except the node agents' command lines, which ``ddsup start`` writes and no one else:
``python -m ddsup agent …`` (one per node under Slurm: ``controller/_launcher.py``) goes to the
agent's own entry, which reads its three options by hand instead of importing ``_cli``
and argparse (``agent/_agent_command``); ``python -m ddsup agents …`` (the simulated nodes
of a local run) to the forker that imports that entry once and forks one agent per node
(``agent/_agent_forker``).
"""

import sys

if sys.argv[1:2] == ["agent"]:
    from ddsup.agent import agent_main

    raise SystemExit(agent_main(sys.argv[2:]))

if sys.argv[1:2] == ["agents"]:
    from ddsup.agent import forker_main

    raise SystemExit(forker_main(sys.argv[2:]))

from ddsup._cli import main

raise SystemExit(main())

"""What ``ddsup start`` runs: the controller of one run.

``_options`` (the command line as a value), ``_start`` (the command), ``_prepare`` (what
is checked before anything is written, and what ``--rehearse`` changes in it),
``_head_start`` (what it does before it imports trio: the agents launched, the control
port's address, the file limit for K agents), ``_takeover`` (trio runs: the controller
takes it all over), ``_controller`` (the trio shell that feeds ``ddsup.decide``'s
``RunState`` and carries out its decisions; ``ddsup restart`` served), ``_connections`` (agents, the lane feed, operators), ``_nodes``
(``LocalNode``/``RemoteNode``), ``_agents``, ``_launcher`` and ``_forked_agents`` (the
agent processes: local, forked or srun; which are admitted), ``_run_facts`` (what the
run tells its processes; an agent's ``Setup`` is ``_controller``'s), ``_run_record``
(what a live run writes), ``_console`` (what ``ddsup start`` prints), ``_lane_publisher``
(the endpoint's settings and ready lanes), ``_walltime`` and ``_own_job`` (the job's end,
requeue).
docs/architecture.md tells how they fit.
"""

from __future__ import annotations

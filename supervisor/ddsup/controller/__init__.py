"""What ``ddsup start`` runs: the controller of one run.

``_options`` (the command line as a value), ``_start`` (the command), ``_prepare`` (what
is checked before anything is written; ``_rehearsal``: the simulated allocation),
``_head_start`` (what it does before it imports trio: the agents launched;
``_control_host``: the control port's address; ``_open_files``: its file limit for K
agents), ``_takeover`` (trio runs: the controller takes it all over), ``_controller``
(the trio shell that feeds ``ddsup.decide``'s ``RunState`` and carries out its
decisions), ``_connections`` (agents, the lane feed, operators), ``_nodes``
(``LocalNode``/``RemoteNode``), ``_agents``, ``_launcher`` and ``_forked_agents`` (the
agent processes: local, forked or srun; ``_inventory``: which are admitted),
``_agent_setup`` and ``_run_facts`` (what the run tells its processes), ``_run_record``
(what a live run writes), ``_console`` (what ``ddsup start`` prints), ``_lane_publisher``
(the endpoint's settings and ready lanes), ``_restart_requests`` (``ddsup restart``
served), ``_walltime`` and ``_own_job`` (the job's end, requeue).
docs/architecture.md tells how they fit.
"""

from __future__ import annotations

"""ddsup: a process supervisor for GPU inference jobs on Slurm clusters.

The public surface is the command line (``ddsup …``); the Python modules are private
(``_name.py``) and may change between releases. Layering, bottom up:

- ``_units``: unit files → validated, immutable :class:`Unit` objects.
- ``_plan``: units + allocation → deterministic placement (:class:`Plan`).
- ``_process``: one child process: spawn in its own group, wait, stop, kill.
- ``_orphans``: the no-orphan layers (subreaper, sweep by invocation id, sentinel).
- ``_service``: one unit instance's lifecycle (start, ready, restart, stop).
- ``_agent`` / ``_controller``: a node's services / the whole run.
- ``_endpoint``: the logical endpoint (router) in front of the lanes.
- ``_fake_vllm``: the vLLM stand-in for rehearsals and tests.
"""

__version__ = "0.1.0"

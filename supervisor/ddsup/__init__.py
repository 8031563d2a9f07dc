"""ddsup: a process supervisor for GPU inference jobs on Slurm clusters.

The public surface is the command line (``ddsup …``); the Python packages may change
between releases. Each folder is a layer and imports only the layers above it in this
list (``tests/architecture/test_layers.py`` holds the code to that; ``docs/architecture.md``
tells the whole story):

- ``units``: unit files → validated, immutable :class:`Unit` objects.
- ``plan``: units + allocation → deterministic placement (:class:`Plan`).
- ``process``: one child process and its tree; the no-orphan layers.
- ``record``: the state vocabulary, events, outcome, status and state directory of a run.
- ``channel``: the authenticated control channel and its typed messages.
- ``service``: one unit instance's life (environment, readiness, restart, stop).
- ``decide``: the run's decisions (``RunState``), pure: no I/O.
- ``agent``: what a node agent runs (and the node runner the controller shares).
- ``controller``: ``ddsup start``: the trio shell that carries the decisions out.
- ``endpoint``: the logical endpoint (router) in front of the lanes.
- ``fake_vllm``: the vLLM stand-in for rehearsals and tests.
- ``ops``: operator commands on a run (status, stop, logs, cleanup).
"""

__version__ = "0.1.0"

"""Unit files → validated, immutable :class:`Unit` objects, and the CLI that checks them.

Layering inside, bottom up: ``_model`` (the frozen dataclasses), ``_printable`` (user
text made safe to print), ``_durations`` and ``_specifiers`` (value syntaxes), ``_sizes``
(sizes), ``_kinds`` (value kinds) and ``_schema`` (the one table of sections and keys), ``_jsonschema`` (the JSON Schema
made from it), ``_builtin`` (the endpoint's default exec and readiness), ``_locate``
(key → line:col), ``_toml`` (a file read as TOML), ``_parse`` (one unit file), ``_job``
(``job.toml`` and submit profiles: the ``[job]`` table, checked the same way),
``_unitset`` (a set of files), ``_verify_command`` (``ddsup verify`` and ``ddsup schema``).

Its names are imported when first used (PEP 562, ``ddsup._lazy``): a node agent that
loads unit files does not pay for ``verify``, ``schema`` and the JSON Schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.units._durations import format_duration as format_duration
    from ddsup.units._durations import parse_duration as parse_duration
    from ddsup.units._durations import parse_signal as parse_signal
    from ddsup.units._job import JOB_FILE as JOB_FILE
    from ddsup.units._job import JobSettings as JobSettings
    from ddsup.units._job import load_job_file as load_job_file
    from ddsup.units._job import parse_job_name as parse_job_name
    from ddsup.units._job import parse_slurm_time as parse_slurm_time
    from ddsup.units._jsonschema import json_schema as json_schema
    from ddsup.units._model import BusyGpus as BusyGpus
    from ddsup.units._model import EndpointSection as EndpointSection
    from ddsup.units._model import LaneSection as LaneSection
    from ddsup.units._model import OnFailure as OnFailure
    from ddsup.units._model import Placement as Placement
    from ddsup.units._model import ProbeKind as ProbeKind
    from ddsup.units._model import ReadySection as ReadySection
    from ddsup.units._model import Restart as Restart
    from ddsup.units._model import Routing as Routing
    from ddsup.units._model import ServiceSection as ServiceSection
    from ddsup.units._model import Unit as Unit
    from ddsup.units._model import UnitSet as UnitSet
    from ddsup.units._printable import printable as printable
    from ddsup.units._schema import SPECIFIERS as SPECIFIERS
    from ddsup.units._sizes import format_size as format_size
    from ddsup.units._sizes import parse_size as parse_size
    from ddsup.units._specifiers import SpecifierError as SpecifierError
    from ddsup.units._specifiers import resolve_argv as resolve_argv
    from ddsup.units._specifiers import resolve_specifiers as resolve_specifiers
    from ddsup.units._unit_type import UnitType as UnitType
    from ddsup.units._unitset import load_unit_files as load_unit_files
    from ddsup.units._unitset import load_unit_set as load_unit_set
    from ddsup.units._unitset import parse_unit_set as parse_unit_set
    from ddsup.units._verify_command import configure_schema as configure_schema
    from ddsup.units._verify_command import configure_verify as configure_verify
    from ddsup.units._verify_command import run_schema as run_schema
    from ddsup.units._verify_command import run_verify as run_verify
    from ddsup.units._vllm_argv import served_names as served_names
    from ddsup.units._vllm_argv import vllm_command_span as vllm_command_span

_LAZY = {
    "Routing": "ddsup.units._model",
    "format_duration": "ddsup.units._durations",
    "BusyGpus": "ddsup.units._model",
    "EndpointSection": "ddsup.units._model",
    "LaneSection": "ddsup.units._model",
    "OnFailure": "ddsup.units._model",
    "Placement": "ddsup.units._model",
    "ProbeKind": "ddsup.units._model",
    "ReadySection": "ddsup.units._model",
    "Restart": "ddsup.units._model",
    "ServiceSection": "ddsup.units._model",
    "format_size": "ddsup.units._sizes",
    "parse_size": "ddsup.units._sizes",
    "served_names": "ddsup.units._vllm_argv",
    "vllm_command_span": "ddsup.units._vllm_argv",
    "configure_schema": "ddsup.units._verify_command",
    "configure_verify": "ddsup.units._verify_command",
    "run_schema": "ddsup.units._verify_command",
    "run_verify": "ddsup.units._verify_command",
    "parse_duration": "ddsup.units._durations",
    "JOB_FILE": "ddsup.units._job",
    "JobSettings": "ddsup.units._job",
    "load_job_file": "ddsup.units._job",
    "parse_job_name": "ddsup.units._job",
    "parse_slurm_time": "ddsup.units._job",
    "parse_signal": "ddsup.units._durations",
    "json_schema": "ddsup.units._jsonschema",
    "Unit": "ddsup.units._model",
    "UnitSet": "ddsup.units._model",
    "UnitType": "ddsup.units._unit_type",
    "printable": "ddsup.units._printable",
    "SPECIFIERS": "ddsup.units._schema",
    "SpecifierError": "ddsup.units._specifiers",
    "resolve_argv": "ddsup.units._specifiers",
    "resolve_specifiers": "ddsup.units._specifiers",
    "load_unit_files": "ddsup.units._unitset",
    "load_unit_set": "ddsup.units._unitset",
    "parse_unit_set": "ddsup.units._unitset",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())

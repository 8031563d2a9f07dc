"""Unit files → validated, immutable :class:`Unit` objects, and the CLI that checks them.

Layering inside, bottom up: ``_model`` (the frozen dataclasses), ``_durations`` and
``_specifiers`` (value syntaxes), ``_kinds`` and ``_schema`` (the one table of sections
and keys), ``_locate`` (key → line:col), ``_parse`` (one file), ``_unitset`` (a set of
files), ``_commands`` (``ddsup verify`` and ``ddsup schema``).
"""

from ddsup._units._commands import configure_schema as configure_schema
from ddsup._units._commands import configure_verify as configure_verify
from ddsup._units._commands import run_schema as run_schema
from ddsup._units._commands import run_verify as run_verify
from ddsup._units._durations import parse_duration as parse_duration
from ddsup._units._durations import parse_signal as parse_signal
from ddsup._units._model import Unit as Unit
from ddsup._units._model import UnitSet as UnitSet
from ddsup._units._model import UnitType as UnitType
from ddsup._units._schema import SPECIFIERS as SPECIFIERS
from ddsup._units._schema import json_schema as json_schema
from ddsup._units._specifiers import SpecifierError as SpecifierError
from ddsup._units._specifiers import resolve_argv as resolve_argv
from ddsup._units._specifiers import resolve_specifiers as resolve_specifiers
from ddsup._units._unitset import load_unit_files as load_unit_files
from ddsup._units._unitset import load_unit_set as load_unit_set
from ddsup._units._unitset import parse_unit_set as parse_unit_set

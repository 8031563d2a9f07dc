"""Which model a request names: the ``model`` of its JSON body, or of its form.

Every vLLM route the endpoint forwards takes a JSON object with an optional ``model``,
except speech to text (``/v1/audio/transcriptions`` and ``…/translations``), which takes
``multipart/form-data`` with a ``model`` field beside the audio file. ``None`` means the
request names no model (vLLM then uses its own; the endpoint, the one it serves when it
serves one). Anything else the endpoint refuses with a typed 400 that says what is wrong,
never a 500: a body nested so deeply that the JSON parser would exhaust the stack
(``[`` × 100,000) is one of those. The JSON depth limit is then Python's
recursion limit (about 1,000 levels less the stack in use, so a little under 1,000).
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Callable
from typing import TypedDict

from ddsup._json import Json
from ddsup.endpoint._api_errors import ApiError, bad_request

_BOUNDARY = re.compile(rb'boundary="?([^";\r\n]{1,200})"?', re.IGNORECASE)
_MODEL_PART = re.compile(rb'\r\ncontent-disposition:[^\r\n]*;\s*name="?model"?[;\s\r]', re.I)
# The JSON scanner of ``json.loads``'s own decoder (C), called without the Python layers
# around it: ``decode`` and ``raw_decode`` match whitespace by regex before and after.
_SCAN: Callable[[str, int], tuple[Json, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # typeshed: the scanner is its own context
)
_JSON_SPACE = " \t\n\r"


class RequestBody(TypedDict, total=False):
    """The keys of a JSON request body the endpoint reads: ``model`` to route by and the
    prompt's keys prefix-aware routing hashes. Each value is as the client sent it (any
    JSON) and checked where it is read; the body itself is relayed untouched."""

    model: Json
    messages: Json
    system: Json
    prompt: Json
    input: Json


def model_of_json(body: bytes) -> str | None:
    """The body's ``model``: ``None`` when absent or null, 400 when it is not a name."""
    return json_request(body)[0]


def json_request(body: bytes) -> tuple[str | None, RequestBody]:
    """The body's ``model`` (as :func:`model_of_json` says) and the whole object, which
    prefix-aware routing reads the prompt from without parsing the body again.

    A body that opens with ``{`` and a byte other than NUL is what ``json.loads`` would
    decode as UTF-8 (it guesses UTF-16 and -32 from NULs and byte order marks only), so
    it is decoded here directly: ``json.detect_encoding``, in Python, cost more than
    the rest of the decision. Such a text is scanned by the decoder's scanner alone; any
    text it does not take whole goes to ``json.loads``, which says what is wrong.
    """
    payload: RequestBody  # checked to be an object below: typing it is free, a cast is not
    try:
        if body[:1] == b"{" and body[1:2] != b"\x00":
            payload = _object(body.decode("utf-8", "surrogatepass"))
        else:
            payload = json.loads(body)
    except RecursionError as err:
        raise bad_request("the body's JSON is nested too deeply") from err
    except (ValueError, UnicodeDecodeError) as err:
        raise bad_request(f"the body is not valid JSON: {err}") from err
    if not isinstance(payload, dict):
        raise bad_request("the body must be a JSON object")
    model = payload.get("model")
    if model is None:
        return None, payload
    if not isinstance(model, str) or not model:
        raise bad_request('the body\'s "model" must be a non-empty string')
    return model, payload


def _object(text: str) -> RequestBody:
    """``json.loads(text)`` for a text that opens with ``{``."""
    try:
        payload, end = _SCAN(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)  # type: ignore[no-any-return]  # raises what is wrong
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        return json.loads(text)  # type: ignore[no-any-return]  # "Extra data"
    return payload  # type: ignore[return-value]  # an object: checked by the caller


def model_of_form(body: bytes, content_type: bytes) -> str | None:
    """The ``model`` field of a ``multipart/form-data`` body (``None``: it has none)."""
    if not content_type.lower().startswith(b"multipart/form-data"):
        raise bad_request("this route takes multipart/form-data (a model field and a file)")
    boundary = _BOUNDARY.search(content_type)
    if boundary is None:
        raise bad_request("multipart/form-data without a boundary")
    delimiter = b"\r\n--" + boundary.group(1)
    for part in (b"\r\n" + body).split(delimiter)[1:]:
        head, blank, value = part.partition(b"\r\n\r\n")
        if blank and _MODEL_PART.search(head + b"\r"):
            return _form_value(value)
    return None


def _form_value(value: bytes) -> str:
    try:
        model = value.decode("utf-8").strip()
    except UnicodeDecodeError as err:
        raise ApiError(400, "invalid_request_error", "the form's model is not UTF-8") from err
    if not model:
        raise bad_request("the form's model field is empty")
    return model

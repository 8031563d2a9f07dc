"""The operator's side of the codec: all an operator's one-request client needs.

``ddsup status`` sends a hello and one request and reads one reply. The whole protocol's
codec (``_codec``) knows every message of the run and imports what they carry (the plan,
the unit sections, every event), which costs the command more CPU than its exchange
with a run of hundreds of lanes. So this reads and writes only the operator's messages, by the rules every
message follows (``_codec_rules``); ``_codec`` adds the run's own messages (one implementation:
the same bytes either way).
"""

from __future__ import annotations

from typing import Any

from ddsup.channel._codec_rules import Decoder, decode_with, encode_fields, line_json, object_parser
from ddsup.channel._hello import Hello
from ddsup.channel._operator_messages import OPERATOR_MESSAGES, OperatorMessage, StatusReply
from ddsup.channel._typed import from_json
from ddsup.record import RunSnapshot


# --- encode -------------------------------------------------------------------------------
def encode_operator(message: Hello | OperatorMessage) -> bytes:
    """One message as a JSON line's bytes (without the newline)."""
    if isinstance(message, StatusReply):  # its rows' text joined: RunSnapshot.json_text
        return f'{{"op":"{message.op}","snapshot":{message.snapshot.json_text()}}}'.encode()
    return line_json({"op": message.op, **encode_fields(message)}).encode()


# --- decode -------------------------------------------------------------------------------
OPERATOR_SPECIAL: dict[type[Any], Decoder] = {
    StatusReply: lambda data: from_json(
        StatusReply, data, parsers={"snapshot": object_parser(RunSnapshot.from_json)}
    ),
}
_OPERATOR_BY_OP: dict[str, type[Any]] = {kind.op: kind for kind in OPERATOR_MESSAGES}


def decode_operator(line: bytes) -> OperatorMessage:
    """The controller's answer to an operator; ChannelError for anything else."""
    message: OperatorMessage = decode_with(_OPERATOR_BY_OP, OPERATOR_SPECIAL, line)
    return message

"""The operator commands' client: one request and its answer, over a blocking socket.

``ddsup status`` asks a live run for its snapshot and exits. Starting an event loop for
that one exchange would cost more than the exchange (trio's import alone does), so
operators speak the channel's protocol (a hello with the secret, the request,
one line back) with the standard library, and only the operator's part of the codec
(``_operator_codec``). The server side is ``_channel_server`` and ``_channel``.
"""

from __future__ import annotations

import socket

from ddsup.channel._hello import MAX_LINE, ChannelError, Hello
from ddsup.channel._operator_codec import decode_operator, encode_operator
from ddsup.channel._operator_messages import OperatorMessage


def request(
    address: tuple[str, int], hello: Hello, message: OperatorMessage, timeout: float
) -> OperatorMessage:
    """``message`` after ``hello``, and the first line back; ChannelError when the run
    cannot be reached, does not answer within ``timeout`` (per step), or breaks the rules."""
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.sendall(encode_operator(hello) + b"\n" + encode_operator(message) + b"\n")
            buffer = bytearray()
            while (end := buffer.find(b"\n")) < 0:
                if len(buffer) > MAX_LINE:
                    raise ChannelError("message too long")
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise ChannelError("the run closed the connection without an answer")
                buffer += chunk
    except OSError as err:
        raise ChannelError(f"cannot reach the run at {address[0]}:{address[1]}: {err}") from err
    return decode_operator(bytes(buffer[:end]))

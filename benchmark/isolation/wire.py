"""Messages between trust domains: a JSON header frame, then the blobs it announces.

The trusted side (the coordinator) never unpickles what an untrusted process sends: headers
are JSON, arrays are ``.npy`` bytes read with ``allow_pickle=False``, and anything else (a
pickled client function, a method's state) is an opaque blob the coordinator only stores
or forwards. A frame is an 8-byte little-endian length and a body (the framing of
:mod:`benchmark.federation.recompute`).
"""

from __future__ import annotations

import io
import json
import socket
from typing import Any, BinaryIO

import numpy as np

from benchmark.federation.recompute import read_frame, write_frame
from benchmark.privacy.errors import PrivacyError

Message = tuple[dict[str, Any], list[bytes]]


class ChannelClosed(ConnectionError):
    """The other process ended (or sent a broken message) before answering."""


def send(stream: BinaryIO, header: dict[str, Any], *blobs: bytes) -> None:
    write_frame(stream, json.dumps({**header, "blobs": len(blobs)}).encode())
    for blob in blobs:
        write_frame(stream, blob)


def recv(stream: BinaryIO) -> Message:
    """The next message; :class:`ChannelClosed` at end of input or on a malformed one."""
    body = read_frame(stream)
    if body is None:
        raise ChannelClosed("the other process closed the channel")
    try:
        header = json.loads(body)
        count = int(header.pop("blobs"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ChannelClosed(f"malformed message header ({type(exc).__name__})") from exc
    blobs = []
    for _ in range(count):
        blob = read_frame(stream)
        if blob is None:
            raise ChannelClosed("the other process closed the channel mid-message")
        blobs.append(blob)
    return header, blobs


def array_bytes(array: Any) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def array_from(blob: bytes) -> np.ndarray:
    """An array sent by another domain: numbers only, never a pickle."""
    try:
        return np.load(io.BytesIO(blob), allow_pickle=False)
    except ValueError as exc:  # object arrays need pickle: not numbers
        raise PrivacyError(
            "client-side functions must return numbers: raw data never leaves a client"
        ) from exc


def stream_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of stream sockets: ours, and the one a child inherits."""
    return socket.socketpair()

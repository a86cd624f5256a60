"""Messages between trust domains: a JSON header frame, then the blobs it announces.

The trusted side (the coordinator) never unpickles what an untrusted process sends: headers
are JSON, arrays are ``.npy`` bytes read with ``allow_pickle=False``, and anything else (a
pickled client function, a method's state) is an opaque blob the coordinator only stores
or forwards. A frame is an 8-byte little-endian length and a body (:func:`write_frame`),
the framing of every channel between the trust domains, the independence check's included.
"""

from __future__ import annotations

import io
import json
import socket
import struct
from typing import Any, BinaryIO

import numpy as np

from benchmark.privacy.errors import PrivacyError

Message = tuple[dict[str, Any], list[bytes]]


class ChannelClosed(ConnectionError):
    """The other process ended (or sent a broken message) before answering."""


class MessageTooLarge(ChannelClosed):
    """The other process announced a message larger than the reader allows (its size is
    not repeated: the sender chose it)."""


FRAME = struct.Struct("<Q")  # a frame's length prefix


def write_frame(stream: BinaryIO, body: bytes) -> None:
    stream.write(FRAME.pack(len(body)))
    stream.write(body)
    stream.flush()


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next frame's body, or None at end of input (a short read is an end too)."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def send(stream: BinaryIO, header: dict[str, Any], *blobs: bytes) -> None:
    write_frame(stream, json.dumps({**header, "blobs": len(blobs)}).encode())
    for blob in blobs:
        write_frame(stream, blob)


def _frame(stream: BinaryIO, left: int | None) -> bytes | None:
    """The next frame's body (None at end of input), refused before it is read when its
    announced length exceeds ``left`` bytes."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    if left is not None and size > left:
        raise MessageTooLarge("the other process sent a message larger than allowed")
    body = stream.read(size)
    return body if len(body) == size else None


def recv(stream: BinaryIO, limit: int | None = None) -> Message:
    """The next message; :class:`ChannelClosed` at end of input or on a malformed one,
    :class:`MessageTooLarge` when it would exceed ``limit`` bytes (header and blobs)."""
    body = _frame(stream, limit)
    if body is None:
        raise ChannelClosed("the other process closed the channel")
    try:
        header = json.loads(body)
        count = int(header.pop("blobs"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ChannelClosed(f"malformed message header ({type(exc).__name__})") from exc
    blobs = []
    left = None if limit is None else limit - len(body)
    for _ in range(count):
        blob = _frame(stream, left)
        if left is not None and blob is not None:
            left -= FRAME.size + len(blob)  # empty frames count too
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
    except Exception:  # object arrays need pickle: not numbers; nor are other bytes
        raise PrivacyError(  # numpy's message quotes the bytes: not chained
            "client-side functions must return numbers: raw data never leaves a client"
        ) from None


def stream_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of stream sockets: ours, and the one a child inherits."""
    return socket.socketpair()

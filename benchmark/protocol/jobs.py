"""Client-side jobs as they cross the trust boundary: a function and its payload pickled
once, before any client of a release runs (:func:`snapshot`), and opened only by processes
that run client code (the client worker, the independence check's recomputations).

A job is run as one of three kinds: per client (``CLIENT``), batched over clients
(``BATCH``), or DP-SGD's ``encode`` over examples (``ENCODE``); :func:`output_rows` reads a
call's output the same way on both sides of a comparison.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from benchmark.privacy.errors import PrivacyError
from benchmark.protocol.wire import FRAME

CLIENT, BATCH, ENCODE = "client", "batch", "encode"
ALIGN = 64  # a job's parts start at multiples of this (its arrays come out aligned)

Rows = dict[str, np.ndarray]


def output_rows(kind: str, output: Any) -> Rows:
    """A call's output as the arrays that are compared (the same reading on both sides)."""
    if kind != ENCODE:
        return {"row": np.asarray(output)}
    if not isinstance(output, Mapping):
        raise PrivacyError(f"encode must return a dict of tensors, got {type(output).__name__}")
    return {str(name): np.asarray(value) for name, value in output.items()}


def snapshot(fn: Any, payload: Any) -> bytes:
    """The function and payload as they are now, before any client of the release ran.

    Pickled with protocol 5, the large contiguous buffers (numpy arrays: a payload of
    embeddings, a scorer's tables) out of band: the blob is a count, the parts' lengths,
    then the pickle stream and each buffer, every part starting at a multiple of
    ``ALIGN`` bytes, so :func:`load_job` unpickles it without copying them (into aligned
    arrays), and a recomputation child forked for each sampled client reuses its parent's
    copy of the buffers instead of copying them again. A buffer that is not contiguous
    stays in the stream."""
    import cloudpickle

    raws: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            raws.append(buffer.raw())
        except BufferError:
            return True  # in band
        return False

    try:
        stream = cloudpickle.dumps((fn, payload), protocol=5, buffer_callback=out_of_band)
    except Exception as exc:
        raise PrivacyError(
            "the client-side function and its payload must be picklable: the pool recomputes "
            f"sampled clients in a separate process ({type(exc).__name__}: {exc})"
        ) from exc
    parts = [memoryview(stream), *raws]
    head = FRAME.pack(len(parts)) + b"".join(FRAME.pack(part.nbytes) for part in parts)
    chunks: list[bytes | memoryview] = [head]
    position = len(head)
    for part in parts:
        padding = -position % ALIGN
        chunks += [bytes(padding), part]
        position += padding + part.nbytes
    return b"".join(chunks)


def job_parts(blob: bytes | bytearray) -> list[memoryview]:
    """The pickle stream and the out-of-band buffers of a :func:`snapshot`, as views of
    ``blob`` (no copies); ``ValueError`` if the layout does not add up."""
    view = memoryview(blob)
    if view.nbytes < FRAME.size:
        raise ValueError("malformed job: too short")
    (count,) = FRAME.unpack_from(view, 0)
    offset = FRAME.size * (count + 1)
    if count < 1 or offset > view.nbytes:
        raise ValueError("malformed job: bad part count")
    parts = []
    for index in range(count):
        (size,) = FRAME.unpack_from(view, FRAME.size * (index + 1))
        offset += -offset % ALIGN
        parts.append(view[offset : offset + size])
        offset += size
    if offset != view.nbytes:
        raise ValueError("malformed job: the parts do not add up to the blob")
    return parts


def load_job(blob: bytes | bytearray) -> tuple[Any, Any]:
    """``(fn, payload)`` of a :func:`snapshot`. Its arrays are views of ``blob``: writable
    when ``blob`` is a ``bytearray`` (as the pool's own payload is), so a client function
    behaves the same in the client worker and in its recomputation."""
    stream, *buffers = job_parts(blob)
    return pickle.loads(stream, buffers=buffers)

"""The method process's vLLM engines: proxies to the coordinator's, over its one channel.

vLLM cannot start in this process's sandbox (:mod:`benchmark.profiles.vllm_engine`); the
method process installs :func:`engine_route` so that a profile's generator samples through
the coordinator (:mod:`benchmark.protocol.engine_calls`). Which model a role loads is the
coordinator's own profile's answer: the proxy names the role, never a model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmark.profiles.base import SamplingParams
from benchmark.profiles.vllm_engine import free_cached_gpu_memory
from benchmark.protocol import wire
from benchmark.protocol.engine_calls import encode_call, encode_rest, read_adapter


class EngineProxy:
    """Samples ``role`` with the coordinator's engine (a
    :class:`~benchmark.profiles.vllm_engine.SamplingEngine`)."""

    def __init__(self, stream: Any, role: str) -> None:
        self._stream = stream
        self.role = role

    def sample(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        adapter: Path | None,
        stay_awake: bool = False,
    ) -> list[str]:
        free_cached_gpu_memory()  # the engine wakes in the coordinator
        lora = None if adapter is None else read_adapter(adapter)
        header, blobs = encode_call(self.role, prompts, params, lora, stay_awake)
        wire.send(self._stream, header, *blobs)
        header, _ = wire.recv(self._stream)
        return [str(text) for text in header["texts"]]

    def rest(self) -> None:
        """Returns once the coordinator's engine sleeps, so what trains next has the GPU."""
        wire.send(self._stream, encode_rest(self.role))
        wire.recv(self._stream)


def engine_route(stream: Any) -> Callable[[str], EngineProxy]:
    """The route :func:`~benchmark.profiles.vllm_engine.route_engines` takes here."""
    return lambda role: EngineProxy(stream, role)

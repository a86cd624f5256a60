"""The coordinator's vLLM engines, serving the method process's sampling calls.

A method process cannot run vLLM in its sandbox (:mod:`benchmark.profiles.vllm_engine`); it
sends sampling calls (:mod:`benchmark.protocol.engine_calls`) and this service answers them
with the engine the coordinator's own profile names for the role, built on first use and
shared with the coordinator's other samplers (DPPrefSyn's public candidates). Only the
method's declared roles are served. The engine holds public weights and the method's
adapter, never client data, and is asleep except while it samples (or between the batches of
one of the method's sampling sessions; the coordinator rests every engine before a pool
call, before it takes the method's answer and when the method process closes), so a call
is served at once, not on the pool's public schedule (no client code runs in it).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from typing import Any

from benchmark.privacy.errors import PrivacyError
from benchmark.profiles.vllm_engine import SamplingEngine, open_engine
from benchmark.protocol.engine_calls import MalformedCall, RestCall, decode_call, write_adapter


class EngineService:
    """Answers sampling calls with the engines of the profile ``profile()`` returns (asked
    on the first call), those its ``roles`` (a method's declared roles) sample with."""

    def __init__(self, profile: Callable[[], Any], roles: Iterable[str]) -> None:
        self._new_profile = profile
        self._roles = frozenset(roles)
        self._served: dict[Any, SamplingEngine] = {}  # by spec

    @cached_property
    def _profile(self) -> Any:
        return self._new_profile()

    @cached_property
    def _declared_engines(self) -> set[Any]:
        """The engines the declared roles sample with (a profile may fill two roles with
        one engine, as ``gpu`` fills both writers with SmolLM2's)."""
        return {self._profile.engine_spec(role) for role in self._roles} - {None}

    def serve(self, header: dict[str, Any], blobs: list[bytes]) -> tuple[dict[str, Any], bytes]:
        call = decode_call(header, blobs)
        spec = self._profile.engine_spec(call.role)
        if spec is None or spec not in self._declared_engines:
            raise PrivacyError(f"the method process asked to sample {call.role!r}: no engine")
        if isinstance(call, RestCall):
            if spec in self._served:
                self._served[spec].rest()
            return {"texts": []}, b""
        if call.adapter is not None and call.adapter.rank > spec.max_lora_rank:
            raise MalformedCall(  # refused here: vLLM would fail inside its engine process
                f"sampling call: LoRA rank {call.adapter.rank} exceeds the engine's "
                f"max_lora_rank of {spec.max_lora_rank}"
            )
        room = spec.max_model_len - call.params.max_new_tokens
        if any(len(prompt) > room for prompt in call.prompts):
            raise MalformedCall(
                f"sampling call: a prompt and {call.params.max_new_tokens} new tokens exceed "
                f"the context of {spec.max_model_len}"
            )
        if spec not in self._served:
            self._served[spec] = open_engine(call.role, spec)
        engine = self._served[spec]
        with tempfile.TemporaryDirectory(prefix="fedsynth-lora-") as tmp:
            adapter = None
            if call.adapter is not None:
                adapter = write_adapter(call.adapter, Path(tmp), spec.model)
            texts = engine.sample(call.prompts, call.params, adapter, call.stay_awake)
            return {"texts": texts}, b""

    def rest(self) -> None:
        """Every engine served asleep, whatever sessions the method left open: the
        coordinator calls it before a pool call, before it takes the method's answer and
        when the method process closes, so client code, the evaluation and the next run
        have the GPU."""
        for engine in self._served.values():
            engine.rest()

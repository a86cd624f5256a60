"""Sampling calls: the method process asks the coordinator's vLLM engine for samples.

vLLM cannot run inside the method process's sandbox (:mod:`benchmark.profiles.vllm_engine`),
so its engine is a harness service in the coordinator, reached over the method process's one
channel. A call is one message: a JSON header naming the role to sample (``engine``), the
token-id ``prompts``, the sampling ``params`` ``[max_new_tokens, temperature, top_p, seed]``
and the LoRA ``adapter``'s shape (``null``: the base weights), with the adapter's weights as
one blob of safetensors bytes, and whether the engine is to ``stay_awake`` for the next
batch; the answer's header holds the ``texts``. A rest call (``{"engine": role, "rest":
true}``) puts the role's engine to sleep, and is answered once it sleeps. The engine loads
public weights and what the method sends, nothing of the clients', so its samples carry no
private data; the coordinator checks every field (:func:`decode_call`) and writes the
adapter directory vLLM reads itself, from those fields (:func:`write_adapter`), so a method
chooses numbers, names and tensors, never a file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.privacy.errors import PrivacyError
from benchmark.profiles.base import SamplingParams

ENGINE = "engine"  # the header key that marks a sampling call (its value: the role)
FIELDS = {ENGINE, "prompts", "params", "adapter", "stay_awake"}
REST_FIELDS = {ENGINE, "rest"}
ADAPTER_FIELDS = {"r", "lora_alpha", "target_modules", "use_rslora"}
WEIGHTS_FILE = "adapter_model.safetensors"
MAX_TOKEN_ID = 2**31 - 1
_MODULE_NAME = re.compile(r"[A-Za-z0-9_.]{1,128}")
# peft settings a vLLM LoRA request cannot carry: an adapter that uses one is refused, not
# sampled as another adapter (their defaults, as peft writes them)
_UNSUPPORTED = {
    "bias": "none",
    "modules_to_save": None,
    "layers_to_transform": None,
    "rank_pattern": {},
    "alpha_pattern": {},
    "use_dora": False,
}


@dataclass(frozen=True)
class Adapter:
    """A peft LoRA adapter as it travels: its shape and its weights (safetensors bytes)."""

    rank: int
    alpha: float
    targets: tuple[str, ...]
    rslora: bool
    weights: bytes


@dataclass(frozen=True)
class SampleCall:
    role: str
    prompts: list[list[int]]
    params: SamplingParams
    adapter: Adapter | None
    stay_awake: bool


@dataclass(frozen=True)
class RestCall:
    role: str


class MalformedCall(PrivacyError):
    """A sampling call the coordinator refuses before anything is sampled."""


def read_adapter(directory: Path) -> Adapter:
    """The adapter peft's ``save_pretrained`` wrote to ``directory`` (method side)."""
    config = json.loads((directory / "adapter_config.json").read_text())
    changed = {k: config[k] for k, v in _UNSUPPORTED.items() if config.get(k, v) not in (v, [])}
    if config.get("peft_type", "LORA") != "LORA" or changed:
        raise ValueError(f"vLLM samples plain LoRA adapters only; this one sets {changed}")
    targets = config["target_modules"]
    targets = [targets] if isinstance(targets, str) else sorted(targets)
    weights = (directory / WEIGHTS_FILE).read_bytes()
    rslora = bool(config.get("use_rslora", False))
    return Adapter(int(config["r"]), float(config["lora_alpha"]), tuple(targets), rslora, weights)


def encode_call(
    role: str,
    prompts: list[list[int]],
    params: SamplingParams,
    adapter: Adapter | None,
    stay_awake: bool,
) -> tuple[dict[str, Any], list[bytes]]:
    sampling = [params.max_new_tokens, params.temperature, params.top_p, params.seed]
    shape = None
    if adapter is not None:
        shape = {"r": adapter.rank, "lora_alpha": adapter.alpha}
        shape |= {"target_modules": list(adapter.targets), "use_rslora": adapter.rslora}
    header = {ENGINE: role, "prompts": prompts, "params": sampling, "adapter": shape}
    header["stay_awake"] = stay_awake
    return header, [] if adapter is None else [adapter.weights]


def encode_rest(role: str) -> dict[str, Any]:
    return {ENGINE: role, "rest": True}


def _whole(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _real(value: Any) -> bool:
    return type(value) in (int, float) and value == value and abs(value) < 1e6


def decode_call(header: dict[str, Any], blobs: list[bytes]) -> SampleCall | RestCall:
    """The call in ``header`` and ``blobs`` (coordinator side), every field checked to be
    plain data of the declared types; else :class:`MalformedCall`."""
    if set(header) == REST_FIELDS and isinstance(header[ENGINE], str):
        if header["rest"] is not True or blobs:
            raise MalformedCall("a rest call is {engine: role, rest: true}, without blobs")
        return RestCall(header[ENGINE])
    if set(header) != FIELDS or not isinstance(header[ENGINE], str):
        raise MalformedCall(f"a sampling call has exactly the fields {sorted(FIELDS)}")
    if type(header["stay_awake"]) is not bool:
        raise MalformedCall("sampling call: stay_awake must be a bool")
    prompts = header["prompts"]
    if not (
        isinstance(prompts, list)
        and all(isinstance(p, list) and p for p in prompts)
        and all(_whole(i, 0, MAX_TOKEN_ID) for p in prompts for i in p)
    ):
        raise MalformedCall("sampling call: prompts must be non-empty lists of token ids")
    sampling = header["params"]
    if not (isinstance(sampling, list) and len(sampling) == 4):
        raise MalformedCall("sampling call: params are [max_new_tokens, temperature, top_p, seed]")
    tokens, temperature, top_p, seed = sampling
    if not (_whole(tokens, 1, 1 << 16) and _whole(seed, 0, 2**63 - 1)):
        raise MalformedCall("sampling call: max_new_tokens in 1..65536 and a seed ≥ 0")
    if not (_real(temperature) and _real(top_p)):
        raise MalformedCall("sampling call: temperature and top_p must be numbers")
    try:
        params = SamplingParams(tokens, float(temperature), float(top_p), seed)
    except ValueError as exc:
        raise MalformedCall(f"sampling call: {exc}") from None
    shape, adapter = header["adapter"], None
    if shape is None:
        if blobs:
            raise MalformedCall("sampling call: weights without an adapter")
    else:
        adapter = _adapter(shape, blobs)
    return SampleCall(header[ENGINE], prompts, params, adapter, header["stay_awake"])


def _adapter(shape: Any, blobs: list[bytes]) -> Adapter:
    if not isinstance(shape, dict) or set(shape) != ADAPTER_FIELDS or len(blobs) != 1:
        raise MalformedCall(f"sampling call: an adapter is {sorted(ADAPTER_FIELDS)} and weights")
    targets = shape["target_modules"]
    if not (
        isinstance(targets, list)
        and 0 < len(targets) <= 64
        and all(isinstance(t, str) and _MODULE_NAME.fullmatch(t) for t in targets)
    ):
        raise MalformedCall("sampling call: target_modules must be module names")
    rank, alpha, rslora = shape["r"], shape["lora_alpha"], shape["use_rslora"]
    if not (_whole(rank, 1, 1024) and _real(alpha) and alpha > 0 and type(rslora) is bool):
        raise MalformedCall("sampling call: r in 1..1024, lora_alpha > 0, use_rslora a bool")
    return Adapter(rank, float(alpha), tuple(targets), rslora, blobs[0])


def write_adapter(adapter: Adapter, directory: Path, base_model: str) -> Path:
    """A peft adapter directory for vLLM, written by the coordinator from the checked
    fields; the weights are parsed as safetensors (tensors only) and saved again."""
    from safetensors import SafetensorError
    from safetensors.torch import load, save_file

    try:
        tensors = load(adapter.weights)
    except (SafetensorError, ValueError) as exc:
        raise MalformedCall(
            f"sampling call: the adapter's weights are not safetensors ({exc})"
        ) from None
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": adapter.rank,
        "lora_alpha": adapter.alpha,
        "target_modules": list(adapter.targets),
        "use_rslora": adapter.rslora,
        "lora_dropout": 0.0,
        "bias": "none",
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(json.dumps(config))
    save_file(tensors, str(directory / WEIGHTS_FILE))
    return directory

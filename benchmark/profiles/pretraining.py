"""A pretrained on-device LM built on this machine: tokenizer + LM pretraining, cached.

No small pretrained causal LM installs offline (``offline-corpora-and-models.md``), and a
random-init on-device model is not a working language model: no private signal moves it
measurably. So the ``cpu`` profile builds its own public starting point, as paper 002
§3.2 / §4 does for its on-device LMs (public pre-training, its "T' = 0"):

1. a byte-level BPE with a small vocabulary trained on the public corpus (paper 002 uses a
   32K SentencePiece; 8K here, so the output layer does not dominate a 2-core step);
2. a GPT-2-shaped model trained with the LM loss on the same corpus (AdamW, constant lr,
   sequence length 64 as everywhere in the benchmark), a held-out slice of the corpus for
   its own before/after numbers.

Everything is deterministic given :class:`PretrainSpec` and the corpus, so the result is
cached under ``cache_dir()/ondevice/<key>/`` where the key hashes every input (corpus
content, spec, library versions). The files are tensors and JSON only (loaded with
``weights_only=True``), and the parameter file carries its key and is refused if it does
not match, so a stale or planted file is rebuilt rather than used. The build time is kept
beside it (``build.json``), never in a record: it depends on the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from benchmark.profiles.base import OnDeviceLM
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.ondevice import GPT2Shape, RandomGPT2LM
from benchmark.profiles.packaged import distribution_version
from benchmark.profiles.shipped import shipped_file
from benchmark.profiles.tokenizer_builders import train_bytelevel_bpe, wrap_bytelevel_bpe

LIBRARIES = ("torch", "transformers", "tokenizers")


@dataclass(frozen=True)
class PretrainSpec:
    """Everything that defines the pretrained on-device LM besides its corpus."""

    vocab_size: int
    shape: GPT2Shape
    epochs: int = 1
    lr: float = 1e-3
    batch_size: int = 32
    max_length: int = 64
    holdout_every: int = 50  # every 50th document is held out for the before/after numbers
    seed: int = 0


def corpus_key(corpus: list[str], spec: PretrainSpec) -> str:
    payload = json.dumps(
        {
            "corpus": hashlib.sha256("\x1e".join(corpus).encode()).hexdigest(),
            "spec": asdict(spec),
            "libraries": {d: distribution_version(d) for d in LIBRARIES},
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


class PretrainedGPT2LM(OnDeviceLM):
    """The on-device LM whose every new model is the cached pretrained checkpoint.

    ``new_model(seed)`` returns the same weights for every seed: a pretrained start is one
    fixed public model (paper 002's pre-trained checkpoint; paper 000's DistilGPT2), and
    run-to-run variation comes from what is trained on top of it.
    """

    def __init__(
        self, tokenizer: Any, shape: GPT2Shape, params: torch.Tensor, label: str, device: str
    ) -> None:
        self._random = RandomGPT2LM(tokenizer, shape)
        self.tokenizer = tokenizer
        self.shape = shape
        self.name = label
        self.device = device
        self._params = params

    def build(self, seed: int) -> Any:
        from benchmark.training import load_flat

        model = self._random.build(0)
        load_flat(model, self._params)
        return model


def pretrained_ondevice_lm(
    corpus: Callable[[], list[str]], spec: PretrainSpec, name: str, device: str = "cpu"
) -> PretrainedGPT2LM:
    """The pretrained on-device LM of ``spec`` on ``corpus()`` whose models live on
    ``device``: from the cache, else built (on the CPU: the build is shipped)."""
    texts = corpus()
    key = corpus_key(texts, spec)
    directory = cache_dir() / "ondevice" / f"{name}-{key}"
    label = f"{spec.shape.label()} pretrained on {name} ({key})"
    cached = _read(directory, key) or _read_shipped(directory.name, key)
    if cached is not None:
        return PretrainedGPT2LM(cached[0], spec.shape, cached[1], label, device)
    began = time.perf_counter()
    tok = train_bytelevel_bpe(texts, spec.vocab_size)
    tokenizer = wrap_bytelevel_bpe(tok)
    params, report = _pretrain(texts, tokenizer, spec)
    report["build_seconds"] = round(time.perf_counter() - began, 1)
    _write(directory, key, tok, params, report)
    return PretrainedGPT2LM(tokenizer, spec.shape, params, label, device)


def _pretrain(
    texts: list[str], tokenizer: Any, spec: PretrainSpec
) -> tuple[torch.Tensor, dict[str, Any]]:
    from benchmark.evaluation.downstream import evaluate_lm, train_lm
    from benchmark.training import flat_params

    held_out = texts[:: spec.holdout_every]
    train = [t for i, t in enumerate(texts) if i % spec.holdout_every]
    model = RandomGPT2LM(tokenizer, spec.shape).new_model(spec.seed)
    before = evaluate_lm(model, tokenizer, held_out, spec.max_length)
    train_lm(
        model, tokenizer, train, spec.epochs, spec.lr, spec.batch_size, spec.seed, spec.max_length
    )
    after = evaluate_lm(model, tokenizer, held_out, spec.max_length)
    report = {"documents": len(train), "held_out_before": before, "held_out_after": after}
    return flat_params(model), report


def _read(directory: Path, key: str) -> tuple[Any, torch.Tensor] | None:
    """The cached tokenizer and parameters, or None if absent or not made for ``key``."""
    from tokenizers import Tokenizer

    params_file, tokenizer_file = directory / "params.pt", directory / "tokenizer.json"
    if not (params_file.exists() and tokenizer_file.exists()):
        return None
    try:
        stored = torch.load(params_file, weights_only=True)
        tok = Tokenizer.from_file(str(tokenizer_file))
    except Exception:  # a corrupt or foreign file is rebuilt, never trusted
        return None
    tokenizer_digest = hashlib.sha256(tokenizer_file.read_bytes()).hexdigest()
    if stored.get("key") != key or stored.get("tokenizer_sha256") != tokenizer_digest:
        return None
    return wrap_bytelevel_bpe(tok), stored["params"]


def _read_shipped(name: str, key: str) -> tuple[Any, torch.Tensor] | None:
    """The build shipped with the project for this key, if its files verify."""
    files = [shipped_file(f"ondevice/{name}/{f}") for f in ("params.pt", "tokenizer.json")]
    if None in files:
        return None
    return _read(files[0].parent, key)


def _write(directory: Path, key: str, tok: Any, params: torch.Tensor, report: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    suffix = f".tmp-{os.getpid()}"
    tokenizer_tmp = directory / f"tokenizer.json{suffix}"
    tok.save(str(tokenizer_tmp))
    digest = hashlib.sha256(tokenizer_tmp.read_bytes()).hexdigest()
    params_tmp = directory / f"params.pt{suffix}"
    torch.save({"key": key, "tokenizer_sha256": digest, "params": params}, params_tmp)
    (directory / "build.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    os.replace(tokenizer_tmp, directory / "tokenizer.json")
    os.replace(params_tmp, directory / "params.pt")

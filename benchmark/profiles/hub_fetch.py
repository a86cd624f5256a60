"""Hub snapshots resolved ahead of a run: which are in the local Hugging Face cache, and
downloading the missing ones (``fedsynth models fetch``, and the coordinator before a
``paper`` run's sandbox starts, since the sandbox has no network and a read-only cache).

A repository often holds one model in several formats (Meta's ``original/`` checkpoint
beside the transformers one, ONNX and OpenVINO exports, ``.bin`` beside ``.safetensors``);
only what transformers and sentence-transformers load is fetched: configs, tokenizers and
one weight format, safetensors where the repository has them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from benchmark.profiles.errors import ModelUnavailableError
from benchmark.profiles.hub import hub_offline, is_cached

SKIPPED_DIRS = {"original", "onnx", "openvino", "coreml", "flax", "tf", "rust"}
SKIPPED_SUFFIXES = {".onnx", ".msgpack", ".h5", ".ot", ".pth", ".gguf", ".tflite", ".mlmodel"}


# A hub repository id as a method may declare it (data from an untrusted adapter).
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


@dataclass(frozen=True)
class HubModel:
    """One hub snapshot a run needs, and what needs it: the profile roles it fills, or the
    method that loads it by id."""

    model_id: str
    revision: str
    roles: tuple[str, ...]

    def label(self) -> str:
        return f"{self.model_id}@{self.revision} ({', '.join(self.roles)})"


class HubClient(Protocol):
    """What fetching needs of the hub (tests pass a fake; nothing here opens a socket)."""

    def files(self, model_id: str, revision: str) -> dict[str, int]:
        """The repository's files at ``revision`` and their sizes in bytes."""

    def download(self, model_id: str, revision: str, files: list[str]) -> str: ...


class HuggingFaceHub:
    """The real hub, through ``huggingface_hub`` (into ``HF_HOME``'s cache)."""

    def files(self, model_id: str, revision: str) -> dict[str, int]:
        from huggingface_hub import HfApi

        info = HfApi().model_info(model_id, revision=revision, files_metadata=True)
        return {f.rfilename: int(f.size or 0) for f in info.siblings or []}

    def download(self, model_id: str, revision: str, files: list[str]) -> str:
        from huggingface_hub import snapshot_download

        return snapshot_download(model_id, revision=revision, allow_patterns=files)


class FetchError(ModelUnavailableError):
    """Some hub models a run or a grid needs are not in the local cache and could not be
    fetched; the message names each one."""


def check_hub_ids(ids: Iterable[object], where: str) -> tuple[str, ...]:
    """``ids`` as hub repository ids (``org/name``), each once; anything else is a
    ``ValueError`` naming ``where``."""
    given = list(ids)
    bad = [i for i in given if not isinstance(i, str) or HUB_ID.fullmatch(i) is None]
    if bad:
        raise ValueError(f"{where}: not hub repository ids (org/name): {bad}")
    return tuple(dict.fromkeys(given))


def hub_requests(by_role: dict[str, str], revision: str) -> list[HubModel]:
    """``{role: model id}`` as one request per distinct model, with the roles it fills."""
    return merged(HubModel(model_id, revision, (role,)) for role, model_id in by_role.items())


def merged(models: Iterable[HubModel]) -> list[HubModel]:
    """One request per (model, revision), with everything that needs it, in first-seen order."""
    needs: dict[tuple[str, str], list[str]] = {}
    for model in models:
        needs.setdefault((model.model_id, model.revision), []).extend(model.roles)
    return [HubModel(m, r, tuple(dict.fromkeys(n))) for (m, r), n in needs.items()]


def wanted_files(files: Iterable[str]) -> list[str]:
    """The files of a repository that loading the model reads (see the module docstring)."""
    files = list(files)
    has_safetensors = any(f.endswith(".safetensors") for f in files)
    kept = []
    for name in files:
        path = PurePosixPath(name)
        if path.parts[0] in SKIPPED_DIRS and len(path.parts) > 1:
            continue
        if path.suffix in SKIPPED_SUFFIXES:
            continue
        if has_safetensors and path.suffix == ".bin" and path.name.startswith("pytorch_model"):
            continue
        kept.append(name)
    return kept


def missing(models: Iterable[HubModel]) -> list[HubModel]:
    """The models not in the local cache."""
    return [m for m in models if not is_cached(m.model_id, m.revision)]


def fetch(
    models: Iterable[HubModel],
    client: HubClient | None = None,
    admit_bytes: Callable[[int], None] | None = None,
) -> dict[HubModel, int]:
    """Download every model of ``models`` missing from the local cache; returns those
    fetched, with the bytes of each on the hub. Offline (``HF_HUB_OFFLINE=1``) nothing is
    downloaded. Every model still missing afterwards is named in one :class:`FetchError`,
    with why. ``admit_bytes`` is called with the bytes to download, in all, once they are
    known and before any is (it raises to refuse them)."""
    absent = missing(models)
    if not absent:
        return {}
    if hub_offline():
        raise _error({m: "not in the local cache and HF_HUB_OFFLINE=1" for m in absent})
    hub = client or HuggingFaceHub()
    failed: dict[HubModel, str] = {}
    listed: dict[HubModel, tuple[list[str], int]] = {}
    for model in absent:
        try:
            sizes = hub.files(model.model_id, model.revision)
            wanted = wanted_files(sizes)
            listed[model] = (wanted, sum(sizes[name] for name in wanted))
        except Exception as exc:  # any failure (auth, gated, network) is reported by name
            failed[model] = _why(exc)
    if admit_bytes is not None:
        admit_bytes(sum(size for _, size in listed.values()))
    fetched: dict[HubModel, int] = {}
    for model, (wanted, size) in listed.items():
        try:
            hub.download(model.model_id, model.revision, wanted)
            fetched[model] = size
        except Exception as exc:
            failed[model] = _why(exc)
            continue
        if not is_cached(model.model_id, model.revision):
            failed[model] = "downloaded, but its config.json is not in the cache"
    if failed:
        raise _error(failed)
    return fetched


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def _error(failed: dict[HubModel, str]) -> FetchError:
    lines = "\n".join(f"  {m.label()}: {why}" for m, why in failed.items())
    return FetchError(
        f"{len(failed)} hub model(s) missing:\n{lines}\n"
        "Fetch them where the hub is reachable (`fedsynth models fetch --profile paper`; "
        "gated models such as meta-llama/* need an accepted licence and `hf auth login`), "
        "into this machine's Hugging Face cache (HF_HOME)."
    )

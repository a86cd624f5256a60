"""Could a model have seen a split's private data? Knowledge cut-offs vs. date windows.

Each :class:`ModelInfo` carries a cut-off month. ``kind="documented"`` means the model's
card or paper states the date of its training data; ``kind="release_bound"`` means no
cut-off is published and the **release month** is used instead: a model cannot know data
written after its release, so the bound keeps a "clean" verdict sound (only ever too
strict). Cut-offs are inclusive to the end of their month.

:func:`check` gives ``contaminated`` when the split's private data may predate the
cut-off (the oldest private record's date, or the window start where that is earlier or
no record is dated, on or before the end of the cut-off month) and always for demo
corpora; ``clean`` when that date is after the cut-off month; ``unknown`` when the split
gives no date to compare or holds undated private records (which no date speaks for).
"""

from __future__ import annotations

import calendar
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from benchmark.data import PRIVATE_PARTS

Status = Literal["contaminated", "clean", "unknown"]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    cutoff: str  # YYYY-MM
    kind: Literal["documented", "release_bound"]
    aliases: tuple[str, ...] = ()

    @property
    def cutoff_end(self) -> str:
        """Last day of the cut-off month, ISO."""
        year, month = map(int, self.cutoff.split("-"))
        return f"{self.cutoff}-{calendar.monthrange(year, month)[1]:02d}"


MODELS: tuple[ModelInfo, ...] = (
    # Meta Llama 3 model card, "Knowledge cutoff" column: March 2023 for 8B.
    ModelInfo("llama-3-8b", "2023-03", "documented", ("meta-llama/meta-llama-3-8b",)),
    ModelInfo(
        "llama-3-8b-instruct", "2023-03", "documented", ("meta-llama/meta-llama-3-8b-instruct",)
    ),
    # Llama 2 model card, "Data Freshness": pretraining data cut off September 2022 ...
    ModelInfo("llama-2-7b", "2022-09", "documented", ("meta-llama/llama-2-7b-hf",)),
    # ... "but some tuning data is more recent, up to July 2023" (the chat models).
    ModelInfo("llama-2-7b-chat", "2023-07", "documented", ("meta-llama/llama-2-7b-chat-hf",)),
    # GPT-2 paper (Radford et al. 2019, sec. 2.1): WebText has no links created after Dec 2017.
    ModelInfo("gpt2", "2017-12", "documented", ("gpt-2", "openai-community/gpt2")),
    ModelInfo(
        "gpt2-large", "2017-12", "documented", ("gpt-2-large", "openai-community/gpt2-large")
    ),
    # DistilGPT2 (HF, distilled on OpenWebTextCorpus); no cut-off published; released Oct 2019.
    ModelInfo("distilgpt2", "2019-10", "release_bound", ("distilbert/distilgpt2",)),
    # RoBERTa paper (Liu et al. 2019, sec. 3.2): newest pretraining data, CC-NEWS, ends Feb 2019.
    ModelInfo("roberta-large", "2019-02", "documented", ("facebookai/roberta-large",)),
    ModelInfo("roberta-base", "2019-02", "documented", ("facebookai/roberta-base",)),
    # BERT (Devlin et al. 2018): BooksCorpus + Wikipedia; no dump date given; released Oct 2018.
    ModelInfo("bert-base-uncased", "2018-10", "release_bound", ("bert", "bert-base")),
    # all-MiniLM-L6-v2 model card lists its training pairs but no date; released Aug 2021.
    ModelInfo(
        "all-minilm-l6-v2", "2021-08", "release_bound", ("sentence-transformers/all-minilm-l6-v2",)
    ),
    # SmolLM2 card/paper (arXiv 2502.02737) give no cut-off; released Nov 2024.
    ModelInfo(
        "smollm2-135m-instruct",
        "2024-11",
        "release_bound",
        ("huggingfacetb/smollm2-135m-instruct",),
    ),
    # all-mpnet-base-v2 (the cpu preference judge's encoder): as all-MiniLM-L6-v2, no date
    # on the card; released Aug 2021.
    ModelInfo(
        "all-mpnet-base-v2",
        "2021-08",
        "release_bound",
        ("sentence-transformers/all-mpnet-base-v2",),
    ),
    # TinyLlama v1.1 (paper's public LLM): no cut-off on the card; released by Apr 2024 (its
    # collection's date), so the bound is April (a later month is only stricter).
    ModelInfo("tinyllama-v1.1", "2024-04", "release_bound", ("tinyllama/tinyllama_v1.1",)),
    # Pythia 2.8B (paper's preference policy): trained on the Pile (2020); no month stated;
    # the suite's paper is Apr 2023 (arXiv 2304.01373), the bound used.
    ModelInfo("pythia-2.8b", "2023-04", "release_bound", ("eleutherai/pythia-2.8b",)),
    # BAAI bge-large-en-v1.5: no cut-off published; released Sep 2023.
    ModelInfo("bge-large-en-v1.5", "2023-09", "release_bound", ("baai/bge-large-en-v1.5",)),
    # Gemma 3 270M (base; the cpu-gemma profile's generator): released Aug 2025, used as
    # the bound (a cut-off stated on the card would only be earlier).
    ModelInfo("gemma-3-270m", "2025-08", "release_bound", ("google/gemma-3-270m",)),
    # Gemma 2 2B: no cut-off on the card; released Jul 2024.
    ModelInfo("gemma-2-2b", "2024-07", "release_bound", ("google/gemma-2-2b",)),
    # Qwen3-4B-Instruct-2507: no cut-off published; released Jul 2025 (the "2507" in its name).
    ModelInfo(
        "qwen3-4b-instruct-2507", "2025-07", "release_bound", ("qwen/qwen3-4b-instruct-2507",)
    ),
    # OpenAI GPT-4o model documentation: knowledge cutoff October 2023.
    ModelInfo("gpt-4o", "2023-10", "documented"),
)


def _index() -> dict[str, ModelInfo]:
    table = {}
    for model in MODELS:
        for name in (model.name, *model.aliases):
            table[name.lower()] = model
    return table


def lookup(name: str) -> ModelInfo:
    """The registered model called ``name`` (case-insensitive; HF ids work as aliases)."""
    model = _index().get(name.lower())
    if model is None:
        known = ", ".join(m.name for m in MODELS)
        raise KeyError(f"no knowledge cut-off registered for model {name!r}; known: {known}")
    return model


@dataclass(frozen=True)
class Verdict:
    status: Status
    model: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "model": self.model, "reason": self.reason}


def _private_dates(manifest: Mapping[str, Any]) -> list[str]:
    counts = manifest.get("counts", {})
    return sorted(counts[p]["dates"]["min"] for p in PRIVATE_PARTS if "dates" in counts.get(p, {}))


def check(manifest: Mapping[str, Any], model: str) -> Verdict:
    """Whether ``model`` may have seen the private parts of the split described by ``manifest``.

    A demo corpus is ``contaminated`` for every model, registered or not (every public
    model has seen it); otherwise an unregistered ``model`` raises :class:`KeyError`."""
    if manifest.get("demo") or manifest.get("source", {}).get("demo"):
        source = manifest.get("source", {}).get("name", "this source")
        known = _index().get(model.lower())
        return Verdict(
            "contaminated",
            known.name if known else model,
            f"{source} is a demo corpus that public models have seen",
        )
    info = lookup(model)
    cutoff = f"{info.cutoff} ({info.kind.replace('_', ' ')})"
    undated = sum(manifest.get("counts", {}).get(p, {}).get("undated", 0) for p in PRIVATE_PARTS)
    if undated:
        return Verdict("unknown", info.name, f"{undated} private records have no date")
    window = manifest.get("filters", {}).get("date_window", {}).get("start")
    # the oldest private record when there is one: a record a source pins to a private part
    # keeps its part even when it predates the window
    candidates = [(d, "oldest private record") for d in _private_dates(manifest)[:1]]
    candidates += [(window, "window start")] if window is not None else []
    if not candidates:
        return Verdict("unknown", info.name, "the split has no date window and no dated records")
    start, basis = min(candidates)
    if start > info.cutoff_end:
        return Verdict("clean", info.name, f"{basis} {start} is after the cut-off {cutoff}")
    return Verdict("contaminated", info.name, f"{basis} {start} is not after the cut-off {cutoff}")

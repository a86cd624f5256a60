"""Paper 002's distillation corpus: the public LLM's top-k next-token logits on public texts.

Paper 002 §4 / App. B.3 runs the teacher (LaMDA 2B) once over the public corpus and keeps
the top-k = 10 logits at every position, so student training never runs the teacher again.
The same pass gives each record's mean-token log p_pub(x) (§5, line 7 of Algorithm 1): one
teacher pass serves both distillation and distribution matching.

Both are functions of public inputs only (the public LLM, the public texts, the length cap,
k), so the result is cached by a hash of those inputs under ``cache_dir()/teacher/<key>/``
in shards of :data:`SHARD_TEXTS` texts (the paper calls the corpus storage-heavy). Shards
hold tensors only, each carries the key and its index and is loaded with
``weights_only=True``; a missing, foreign or corrupt shard makes the whole corpus be
recomputed, never trusted. A sandboxed method process may read the cache but not write it
(a submission must not plant a corpus another one distills from): there the corpus is
computed and kept in memory only, and a trusted caller (the ``paper002`` suite's ``prepare``,
``leaderboard.preparations.warm_teacher``) builds it beforehand.

Choices the paper leaves open: texts are tokenised without special tokens and truncated
to the on-device LM's length cap; the teacher distribution over the kept k entries is the
softmax of their logits (renormalised, the rest zero); see ``methods/public_training.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.files import atomic_write
from benchmark.profiles.base import OnDeviceLM
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.packaged import distribution_version

FORMAT = "teacher-corpus/1"
SHARD_TEXTS = 2048


@dataclass
class TeacherCorpus:
    """Per public text: its token ids, the teacher's top-k next-token ids and logits at each
    predicted position (shape (len − 1, k)), and its mean-token log p_pub (NaN if < 2 tokens).
    """

    ids: list[list[int]]
    topk_ids: list[torch.Tensor]
    topk_logits: list[torch.Tensor]
    mean_logprob: np.ndarray


def corpus_key(llm: OnDeviceLM, texts: list[str], max_length: int, top_k: int) -> str:
    payload = json.dumps(
        {
            "format": FORMAT,
            "llm": llm.name,
            "vocab": len(llm.tokenizer),
            "texts": hashlib.sha256("\x1e".join(texts).encode()).hexdigest(),
            "max_length": max_length,
            "top_k": top_k,
            "libraries": {d: distribution_version(d) for d in ("torch", "transformers")},
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def teacher_corpus(
    llm: OnDeviceLM, texts: list[str], max_length: int, top_k: int, batch_size: int = 16
) -> TeacherCorpus:
    """The distillation corpus of ``texts`` under ``llm``: from the cache, else computed (and
    cached where this process may write)."""
    key = corpus_key(llm, texts, max_length, top_k)
    directory = cache_dir() / "teacher" / key
    cached = _read(directory, key, len(texts))
    if cached is not None:
        return cached
    corpus = _compute(llm, texts, max_length, top_k, batch_size)
    # a sandboxed method process reads the cache, never writes it (Landlock refuses the
    # write: PermissionError, or torch.save's RuntimeError when the directory exists)
    with contextlib.suppress(OSError, RuntimeError):
        _write(directory, key, corpus)
    return corpus


def _compute(
    llm: OnDeviceLM, texts: list[str], max_length: int, top_k: int, batch_size: int
) -> TeacherCorpus:
    from benchmark.evaluation.downstream import (
        _length_sorted_batches,
        encode,
        model_device,
        pad_right,
    )
    from benchmark.progress import progress

    model = llm.new_model(0)
    device = model_device(model)
    seqs = encode(llm.tokenizer, texts, max_length)
    vocab = len(llm.tokenizer)
    empty = torch.zeros((0, top_k))
    topk_ids: list[torch.Tensor] = [empty.long()] * len(seqs)
    topk_logits: list[torch.Tensor] = [empty.float()] * len(seqs)
    mean = np.full(len(seqs), np.nan)
    usable = [i for i, s in enumerate(seqs) if len(s) >= 2]
    batches = list(_length_sorted_batches([seqs[i] for i in usable], batch_size))
    with torch.inference_mode():
        for local in progress(batches, "teacher pass", unit="batch"):
            rows = [usable[i] for i in local]
            ids, mask = pad_right([seqs[i] for i in rows], device)
            # a padded output layer has rows past the tokenizer: never a student's token
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1, :vocab].float()
            logp = logits.log_softmax(-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            values, indices = logits.topk(top_k, dim=-1)
            for j, row in enumerate(rows):
                n = len(seqs[row]) - 1
                topk_ids[row] = indices[j, :n].cpu()
                topk_logits[row] = values[j, :n].cpu()
                mean[row] = float(logp[j, :n].mean())
    return TeacherCorpus(seqs, topk_ids, topk_logits, mean)


def _shard_path(directory: Path, index: int) -> Path:
    return directory / f"shard-{index:05d}.pt"


def _read(directory: Path, key: str, count: int) -> TeacherCorpus | None:
    """The cached corpus of ``count`` texts, or None if any shard is missing, foreign,
    corrupt or not shaped as written."""
    ids: list[list[int]] = []
    topk_ids: list[torch.Tensor] = []
    topk_logits: list[torch.Tensor] = []
    means: list[np.ndarray] = []
    for index in range(math.ceil(count / SHARD_TEXTS)):
        path = _shard_path(directory, index)
        if not path.is_file():
            return None
        try:
            shard = torch.load(path, weights_only=True)
            if shard.get("key") != key or shard.get("index") != index:
                return None
            lengths = shard["lengths"].tolist()
            flat, tid, tlog = shard["ids"], shard["topk_ids"], shard["topk_logits"]
            expected = min(SHARD_TEXTS, count - index * SHARD_TEXTS)
            predicted_total = sum(max(n - 1, 0) for n in lengths)
            shapes = (len(lengths), sum(lengths), len(tid), len(tlog), len(shard["mean_logprob"]))
            if shapes != (expected, len(flat), predicted_total, predicted_total, expected):
                return None
            start = predicted = 0
            for n in lengths:
                ids.append(flat[start : start + n].tolist())
                m = max(n - 1, 0)
                topk_ids.append(tid[predicted : predicted + m].long())
                topk_logits.append(tlog[predicted : predicted + m].float())
                start, predicted = start + n, predicted + m
            means.append(shard["mean_logprob"].double().numpy())
        except Exception:  # a corrupt or foreign shard: recompute, never trust
            return None
    mean = np.concatenate(means) if means else np.zeros(0)
    return TeacherCorpus(ids, topk_ids, topk_logits, mean)


def _write(directory: Path, key: str, corpus: TeacherCorpus) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index, start in enumerate(range(0, len(corpus.ids), SHARD_TEXTS)):
        part = slice(start, start + SHARD_TEXTS)
        ids = corpus.ids[part]
        shard: dict[str, Any] = {
            "key": key,
            "index": index,
            "lengths": torch.tensor([len(s) for s in ids], dtype=torch.long),
            "ids": torch.tensor([t for s in ids for t in s], dtype=torch.long),
            "topk_ids": torch.cat(corpus.topk_ids[part]).int(),
            "topk_logits": torch.cat(corpus.topk_logits[part]).float(),
            "mean_logprob": torch.from_numpy(corpus.mean_logprob[part].copy()),
        }
        buffer = io.BytesIO()
        torch.save(shard, buffer)
        atomic_write(_shard_path(directory, index), buffer.getvalue())

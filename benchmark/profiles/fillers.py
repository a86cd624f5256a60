"""Mask-fill variation operators (PrE-Text's ``Variation``).

PrE-Text masks ``MASK%`` of a sample's tokens at random and lets RoBERTa-large fill them
(temperature 1, top-p 1); calling :meth:`MaskedFiller.fill` ``W_steps`` times repeats that.
Both fillers here choose the positions the same way (:func:`choose_mask`): exactly
``round(mask_fraction * n)`` distinct token positions, at least one when the fraction is
positive. Special tokens are never sampled into a text. Text beyond the model's context is
kept verbatim (only the leading window is varied).

- :class:`MLMFiller` is the paper's operator: one forward pass of a masked LM, every masked
  position sampled independently from its predicted distribution.
- :class:`CausalSpanFiller` is the substitute where no masked LM exists (``tiny``, ``cpu``):
  a causal LM rewrites the text left to right, copying unmasked tokens and sampling masked
  ones from its next-token distribution. With an ``instruction`` the prompt also shows the
  whole text with its masked spans as ``[MASK]``, so an instruction-tuned model (SmolLM2) sees
  the right-hand context that an MLM would; each masked span keeps its token count. A base
  model (no chat template) gets a ``lead`` after the masked text, so that the rewritten
  text reads as the continuation the prompt announces.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from benchmark.profiles.base import MaskedFiller
from benchmark.profiles.hf_generator import HFGenerator, sample_tokens, start_id
from benchmark.profiles.seeding import seeded


def choose_mask(n: int, mask_fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Boolean mask over ``n`` positions with ``round(mask_fraction * n)`` (>= 1) set."""
    if not 0.0 <= mask_fraction <= 1.0:
        raise ValueError(f"mask_fraction must be in [0, 1], got {mask_fraction}")
    k = round(mask_fraction * n)
    if mask_fraction > 0 and n > 0:
        k = max(k, 1)
    mask = np.zeros(n, dtype=bool)
    mask[rng.choice(n, size=k, replace=False)] = True
    return mask


def _banned_ids(tokenizer: Any) -> list[int]:
    return sorted(set(tokenizer.all_special_ids))


class MLMFiller(MaskedFiller):
    """Mask filling with a masked LM (RoBERTa-large in ``paper``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        temperature: float = 1.0,
        top_p: float = 1.0,
        batch_size: int = 16,
        device: str = "cpu",
    ) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p = top_p
        self.batch_size = batch_size
        self.device = device
        limit = min(tokenizer.model_max_length, model.config.max_position_embeddings)
        self.window = limit - 2  # room for the start and end special tokens

    def fill(self, texts: list[str], mask_fraction: float, seed: int) -> list[str]:
        rng = np.random.default_rng(seed)
        tok = self.tokenizer
        start = tok.cls_token_id if tok.cls_token_id is not None else tok.bos_token_id
        end = tok.sep_token_id if tok.sep_token_id is not None else tok.eos_token_id
        ids = [list(x) for x in tok(list(texts), add_special_tokens=False)["input_ids"]]
        masks = [choose_mask(min(len(x), self.window), mask_fraction, rng) for x in ids]
        out: list[str] = []
        with torch.no_grad(), seeded(seed):
            for lo in range(0, len(ids), self.batch_size):
                chunk = range(lo, min(lo + self.batch_size, len(ids)))
                filled = self._fill_batch(
                    [ids[i][: self.window] for i in chunk], [masks[i] for i in chunk], start, end
                )
                for i, window in zip(chunk, filled, strict=True):
                    out.append(tok.decode(window + ids[i][self.window :], skip_special_tokens=True))
        return out

    def _fill_batch(
        self, windows: list[list[int]], masks: list[np.ndarray], start: int, end: int
    ) -> list[list[int]]:
        width = max(len(w) for w in windows) + 2
        ids = torch.full((len(windows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        where = torch.zeros_like(ids, dtype=torch.bool)
        for r, (window, mask) in enumerate(zip(windows, masks, strict=True)):
            row = torch.tensor([start, *window, end])
            ids[r, : len(row)] = row
            attn[r, : len(row)] = 1
            where[r, 1 : 1 + len(window)] = torch.from_numpy(mask)
        ids[where] = self.tokenizer.mask_token_id
        if where.any():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=attn.to(self.device))
            sampled = sample_tokens(
                logits.logits[where.to(self.device)],
                self.temperature,
                self.top_p,
                _banned_ids(self.tokenizer),
            )
            ids[where] = sampled.cpu()
        return [ids[r, 1 : 1 + len(w)].tolist() for r, w in enumerate(windows)]


class CausalSpanFiller(MaskedFiller):
    """Mask filling with a causal LM: copy unmasked tokens, sample masked ones in order."""

    def __init__(
        self,
        generator: HFGenerator,
        instruction: str | None = None,
        lead: str = "",
        temperature: float = 1.0,
        top_p: float = 1.0,
        batch_size: int = 8,
    ) -> None:
        self.generator = generator
        self.instruction = instruction
        self.lead = lead
        self.temperature = temperature
        self.top_p = top_p
        self.batch_size = batch_size

    def _banned(self) -> list[int]:
        """Special tokens, and in instruction mode every token that could spell the
        ``[MASK]`` marker, which the model would otherwise copy from its prompt."""
        if not hasattr(self, "_banned_cache"):
            tok = self.generator.tokenizer
            banned = set(_banned_ids(tok))
            if self.instruction is not None:
                banned |= {
                    i
                    for i in range(len(tok))
                    if any(m in tok.decode([i]) for m in ("MASK", "[", "]"))
                }
            self._banned_cache = sorted(banned)
        return self._banned_cache

    def _window(self) -> int:
        """How many leading text tokens to vary so prefix + text fit in the context."""
        total = self.generator.max_positions
        if self.instruction is None:
            return total - 1
        shown = f"{self.instruction}{self.lead}"
        overhead = len(self.generator.encode_prompts([shown], chat=True)[0]) + 16
        # the prompt shows the text with [MASK] markers (<= ~2 tokens per text token), then
        # the text itself follows: ~3 positions per text token
        return max(1, (total - overhead) // 3)

    def _prefix(self, window: list[int], mask: np.ndarray) -> list[int]:
        gen = self.generator
        if self.instruction is None:
            return [start_id(gen.tokenizer)]
        shown = f"{self.instruction}\n\n{self._render(window, mask)}{self.lead}"
        return gen.encode_prompts([shown], chat=True)[0]

    def _render(self, window: list[int], mask: np.ndarray) -> str:
        """The text with each maximal masked run shown as ``[MASK]`` (keeping its spacing)."""
        parts: list[str] = []
        i = 0
        while i < len(window):
            j = i
            while j < len(window) and mask[j] == mask[i]:
                j += 1
            piece = self.generator.tokenizer.decode(window[i:j])
            if mask[i]:
                stripped = piece.strip()
                lead = piece[: len(piece) - len(piece.lstrip())]
                trail = piece[len(piece.rstrip()) :] if stripped else ""
                piece = f"{lead}[MASK]{trail}"
            parts.append(piece)
            i = j
        return "".join(parts)

    def fill(self, texts: list[str], mask_fraction: float, seed: int) -> list[str]:
        rng = np.random.default_rng(seed)
        tok = self.generator.tokenizer
        window = self._window()
        ids = [list(x) for x in tok(list(texts), add_special_tokens=False)["input_ids"]]
        masks = [choose_mask(min(len(x), window), mask_fraction, rng) for x in ids]
        model = self.generator.model
        was_training = model.training
        model.eval()
        out: list[str] = []
        try:
            with torch.no_grad(), seeded(seed), self.generator.sampling_context():
                for lo in range(0, len(ids), self.batch_size):
                    chunk = range(lo, min(lo + self.batch_size, len(ids)))
                    filled = self._fill_batch(
                        [ids[i][:window] for i in chunk], [masks[i] for i in chunk]
                    )
                    for i, new in zip(chunk, filled, strict=True):
                        out.append(tok.decode(new + ids[i][window:], skip_special_tokens=True))
        finally:
            model.train(was_training)
        return out

    def _fill_batch(self, windows: list[list[int]], masks: list[np.ndarray]) -> list[list[int]]:
        gen = self.generator
        if not any(m.any() for m in masks):
            return [list(w) for w in windows]
        prefixes = [self._prefix(w, m) for w, m in zip(windows, masks, strict=True)]
        if any(len(p) + len(w) > gen.max_positions for p, w in zip(prefixes, windows, strict=True)):
            raise ValueError(f"a masked text does not fit {gen.name}'s context")
        pad = gen.tokenizer.pad_token_id
        prefix_ids, attn = gen.left_pad(prefixes)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        lengths = torch.tensor([len(p) for p in prefixes], device=gen.device)
        width = max(len(w) for w in windows)
        text = torch.full((len(windows), width), pad, dtype=torch.long, device=gen.device)
        where = torch.zeros((len(windows), width), dtype=torch.bool, device=gen.device)
        for r, (w, m) in enumerate(zip(windows, masks, strict=True)):
            text[r, : len(w)] = torch.tensor(w)
            where[r, : len(w)] = torch.from_numpy(m)
        banned, head = self._banned(), gen.output_head()
        columns = [int(c) for c in torch.nonzero(where.any(0)).flatten()]
        # feed prefix + text up to the first masked column, then the text between masked
        # columns; the last logits always predict the next masked column
        past, fed = gen.new_cache(prefix_ids.shape[1] + width), 0
        for col in columns:
            chunk = text[:, fed:col]
            chunk_pos = lengths.unsqueeze(1) + torch.arange(fed, col, device=gen.device)
            if col == columns[0]:
                chunk = torch.cat([prefix_ids, chunk], 1)
                chunk_pos = torch.cat([positions, chunk_pos], 1)
            attn = torch.cat([attn, torch.ones_like(text[:, fed:col])], 1)
            # only the next masked column is sampled (among the generator's output ids)
            sampled, past = gen.next_tokens(
                head, self.temperature, self.top_p, banned,
                input_ids=chunk, attention_mask=attn, position_ids=chunk_pos, past_key_values=past,
            )  # fmt: skip
            text[:, col] = torch.where(where[:, col], sampled, text[:, col])
            fed = col
        return [text[r, : len(w)].tolist() for r, w in enumerate(windows)]

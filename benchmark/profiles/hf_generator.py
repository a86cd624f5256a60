"""A :class:`Generator` over any HF causal LM (tiny GPT-2, SmolLM2, the paper's LLaMA).

Choices (the papers do not fix them):
- ``temperature == 0`` means greedy decoding; otherwise pure temperature + nucleus sampling
  (``top_k`` is disabled explicitly, so transformers' default ``top_k=50`` never applies).
- A batch is reproducible given ``SamplingParams.seed`` and the same prompt list (torch's RNG
  is forked and seeded, so the caller's global RNG state is untouched).
- Prompts are sorted by length and batched with left padding (decoder-only), then put
  back in the caller's order; prompts that do not fit in the context are cut from the left.
- An empty prompt becomes the BOS token so unconditional sampling works.
- Decoding is this module's own loop over the model's KV cache, not transformers'
  ``generate``. The cache is preallocated for the whole generation and written in place
  (:mod:`benchmark.profiles.kv_cache`): the same samples without a copy per step. A token
  is drawn by inverting its row's CDF at one uniform (:func:`sample_tokens`;
  ``torch.multinomial`` draws an exponential for every vocabulary entry, a cost at
  SmolLM2's 49k vocabulary: ``docs/measurements/working-scale.md#generation``), and a row
  that has ended gets padding, as ``generate`` pads it. Same distribution, other draws.
- ``logprobs`` tokenises prompt and completion separately and concatenates them, so the
  scored tokens are exactly the completion's own tokens; no end-of-turn token is added.
- ``fast_sampling``: sampling (never scoring or training; ``generate`` and the span filler,
  through :meth:`HFGenerator.sampling_context`) runs under bf16 autocast when
  the CPU has native bf16 matrix kernels (AVX512-BF16 / AMX; oneDNN says so), where it
  is faster (``docs/measurements/working-scale.md#generation``). Autocast keeps the fp32
  weights untouched (LoRA / DPO train on them)
  and casts per matmul. On a CPU without native bf16 it would be slower, so it stays fp32
  there; the profile records which path ran (:func:`sampling_precision`).
- ``output_ids`` (a speed route, off unless given): ``generate`` samples only among these
  token ids, from the model's distribution renormalised over them; the LM head is applied
  to their rows only (Gemma 3 270M's 262k-entry head is 63 % of its parameters and of a
  decode step's multiply-adds; ``measurements/bench_generation.py --output-vocab``).
  Scoring (``logprobs``) and the span filler always use the whole vocabulary.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from benchmark.profiles.base import Generator, SamplingParams, context_length
from benchmark.profiles.kv_cache import PreallocatedCache
from benchmark.profiles.seeding import seeded
from benchmark.progress import progress


def start_id(tokenizer: Any) -> int:
    """BOS if the tokenizer has one, else EOS (GPT-2 uses ``<|endoftext|>`` for both)."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def encode_prompts(tokenizer: Any, prompts: list[str], chat: bool) -> list[list[int]]:
    """Token ids of each prompt, through the chat template when ``chat`` and one exists."""
    if not prompts:
        return []
    if chat and tokenizer.chat_template:
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(list(prompts))["input_ids"]
    return [list(x) if len(x) else [start_id(tokenizer)] for x in ids]


def sample_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, banned: Sequence[int] = ()
) -> torch.Tensor:
    """One token per row of ``logits`` (rows x vocab): greedy at ``temperature <= 0``, else
    temperature + nucleus sampling, by inverting each row's CDF (float64) at one uniform
    in (0, 1], so a token of probability 0 (banned, or outside the nucleus) is never drawn.
    Draws from torch's global RNG (the callers seed it)."""
    logits = logits.float()
    if banned:
        logits = logits.clone()
        logits[:, list(banned)] = float("-inf")
    if temperature <= 0:
        return logits.argmax(-1)
    probs = (logits / temperature).softmax(-1)
    if top_p < 1.0:
        probs = nucleus(probs, top_p)
    cdf = probs.double().cumsum(-1)
    uniform = 1.0 - torch.rand(len(cdf), 1, dtype=torch.float64, device=cdf.device)
    drawn = torch.searchsorted(cdf, uniform * cdf[:, -1:]).squeeze(-1)
    return drawn.clamp(max=probs.shape[-1] - 1)


# A row whose most likely tokens up to this many hold its nucleus skips the full sort.
NUCLEUS_CANDIDATES = 1024


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` with every token outside its row's nucleus set to 0: in descending order
    of probability, ties by token id, a token is kept while the mass before it is below
    ``top_p``. Sorting a 49k vocabulary for every row at every step was a third of a
    batch's time, so a row is first ordered among its top :data:`NUCLEUS_CANDIDATES`
    tokens; where those hold more than ``top_p`` (with a margin for rounding) and the last
    kept token's ties all lie among them, that order is the full sort's. Other rows are
    sorted whole."""
    out = torch.empty_like(probs)
    _, candidates = probs.topk(min(NUCLEUS_CANDIDATES, probs.shape[-1]), -1)
    candidates = candidates.sort(-1).values  # by token id, so a stable sort breaks ties by id
    top, order = probs.gather(-1, candidates).sort(dim=-1, descending=True, stable=True)
    order = candidates.gather(-1, order)
    before = top.cumsum(-1) - top
    last_kept = torch.where(before < top_p, top, torch.inf).amin(-1)
    inside = (top.sum(-1) >= top_p + 1e-5) & (top[:, -1] < last_kept)
    for rows, (ordered, ids) in (
        (inside, (top[inside], order[inside])),
        (~inside, probs[~inside].sort(dim=-1, descending=True, stable=True)),
    ):
        if rows.any():
            ordered[ordered.cumsum(-1) - ordered >= top_p] = 0.0
            out[rows] = torch.zeros_like(probs[rows]).scatter(-1, ids, ordered)
    return out


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a peft model (an adapter injected into a base model)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


@contextlib.contextmanager
def merged_adapter(model: Any) -> Iterator[None]:
    """The LoRA update of peft model ``model`` folded into its base weights inside the block,
    so sampling costs what the base model costs (unmerged, every adapted layer adds its own
    small ops per token). On exit the exact base weights are copied back (unmerging alone
    would leave rounding error)."""
    tuner = model.base_model
    saved = [
        (p, p.detach().to("cpu", copy=True))
        for name, p in tuner.model.named_parameters()
        if ".base_layer." in name
    ]
    tuner.merge_adapter()
    try:
        yield
    finally:
        tuner.unmerge_adapter()
        with torch.no_grad():
            for param, original in saved:
                param.copy_(original)


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU has native bf16 matrix kernels (oneDNN's check)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def sampling_precision(fast_sampling: bool, device: str = "cpu") -> str:
    """The precision sampling runs at: ``bf16-autocast`` or ``fp32``."""
    return "bf16-autocast" if fast_sampling and device == "cpu" and native_bf16() else "fp32"


class HFGenerator(Generator):
    """Batched sampling and scoring with a transformers causal LM."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        name: str,
        batch_size: int = 16,
        device: str = "cpu",
        fast_sampling: bool = False,
        output_ids: Sequence[int] | None = None,
    ) -> None:
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.name = name
        self.batch_size = batch_size
        self.device = device
        self.precision = sampling_precision(fast_sampling, device)
        self.output_ids = None
        if output_ids is not None:
            if getattr(model.config, "final_logit_softcapping", None):
                raise ValueError("output_ids: the head's logit soft-capping is not applied")
            ids = torch.tensor(sorted(set(output_ids)), dtype=torch.long, device=device)
            self.output_ids = torch.unique(torch.cat([ids, self._end_ids()]))
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def sampling_context(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when :attr:`precision` says so, else nothing: for every sampling
        loop over this model (``generate`` and the span filler), never scoring or training."""
        if self.precision == "bf16-autocast":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @property
    def max_positions(self) -> int:
        return context_length(self.model)

    @contextlib.contextmanager
    def adapted(self, model: Any) -> Iterator[None]:
        """Sampling from ``model`` (see :meth:`Generator.adapted`): a peft adapter injected
        into :attr:`model` is merged into its weights inside the block (the reference code
        merges before generating too); a model fine-tuned in place needs nothing."""
        if is_peft_model(model):
            if model.get_base_model() is not self.model:
                raise ValueError(f"the adapter is not on {self.name}'s model")
            with merged_adapter(model):
                yield
        elif model is self.model:
            yield
        else:
            raise ValueError(f"{self.name} samples only its own model, or an adapter on it")

    def encode_prompts(self, prompts: list[str], chat: bool) -> list[list[int]]:
        return encode_prompts(self.tokenizer, prompts, chat)

    def left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ids and attention mask on the model's device."""
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _end_ids(self) -> torch.Tensor:
        """The token ids that end a sample: the model's generation config's, else EOS."""
        ends = self.model.generation_config.eos_token_id
        if ends is None:
            ends = self.tokenizer.eos_token_id
        ends = [ends] if isinstance(ends, int) else list(ends)
        return torch.tensor(ends, device=self.device)

    def new_cache(self, capacity: int) -> PreallocatedCache:
        """A KV cache for ``capacity`` positions of a sampling loop over :attr:`model`, in
        the dtype its attention reads under :meth:`sampling_context`."""
        stored = torch.bfloat16 if self.precision == "bf16-autocast" else None
        return PreallocatedCache(self.model, capacity, stored)

    def output_head(self) -> torch.Tensor | None:
        """The LM head's rows of :attr:`output_ids` (``None``: the whole vocabulary), taken
        once per sampling loop (fine-tuning changes the head between loops), in bf16 under
        bf16 autocast: autocast caches the casts of parameters only, so a copy in fp32 was
        cast again at every step, the values the same."""
        if self.output_ids is None:
            return None
        rows = self.model.get_output_embeddings().weight[self.output_ids]
        return rows.to(torch.bfloat16) if self.precision == "bf16-autocast" else rows

    def next_tokens(
        self,
        head: torch.Tensor | None,
        temperature: float,
        top_p: float,
        banned: Sequence[int] = (),
        **inputs: Any,
    ) -> tuple[torch.Tensor, Any]:
        """One forward over ``inputs`` (a KV-cached step) and a token id per row drawn from
        its last position, among :attr:`output_ids` when set (``head``: :meth:`output_head`),
        never one of ``banned``; and the cache."""
        logits, past = self._step(head, **inputs)
        if self.output_ids is None:
            return sample_tokens(logits, temperature, top_p, banned), past
        ids = self.output_ids
        banned_ids = torch.tensor(list(banned), dtype=torch.long, device=ids.device)
        rows = [int(r) for r in torch.nonzero(torch.isin(ids, banned_ids)).flatten()]
        return self.output_ids[sample_tokens(logits, temperature, top_p, rows)], past

    def _step(self, head: torch.Tensor | None, **inputs: Any) -> tuple[torch.Tensor, Any]:
        """The last position's logits and the KV cache after one forward: over the whole
        vocabulary, or over :attr:`output_ids` only (``head`` holds their rows)."""
        if head is None:
            out = self.model(**inputs, use_cache=True, logits_to_keep=1)
            return out.logits[:, -1], out.past_key_values
        out = self.model.get_decoder()(**inputs, use_cache=True)
        return torch.nn.functional.linear(out.last_hidden_state[:, -1], head), out.past_key_values

    def _decode(
        self, ids: torch.Tensor, mask: torch.Tensor, params: SamplingParams
    ) -> torch.Tensor:
        """Up to ``max_new_tokens`` new tokens per row of a left-padded batch (rows x steps,
        padding after a row's end token), one cached forward per step that keeps only the
        last position's logits."""
        if params.max_new_tokens < 1:
            return ids.new_zeros((len(ids), 0))
        ends, pad = self._end_ids(), self.tokenizer.pad_token_id
        head = self.output_head()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        past = self.new_cache(ids.shape[1] + params.max_new_tokens)
        sample = functools.partial(
            self.next_tokens, head, temperature=params.temperature, top_p=params.top_p
        )
        token, past = sample(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past
        )
        position = positions[:, -1:]
        ended = torch.zeros(len(ids), dtype=torch.bool, device=ids.device)
        steps: list[torch.Tensor] = []
        for step in range(params.max_new_tokens):
            token = torch.where(ended, pad, token)
            steps.append(token)
            ended |= torch.isin(token, ends)
            if bool(ended.all()) or step + 1 == params.max_new_tokens:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            position = position + 1
            token, past = sample(
                input_ids=token[:, None], attention_mask=mask, position_ids=position,
                past_key_values=past,
            )  # fmt: skip
        return torch.stack(steps, 1)

    def generate(self, prompts: list[str], params: SamplingParams, chat: bool = True) -> list[str]:
        if not prompts:
            return []
        room = self.max_positions - params.max_new_tokens
        if room < 1:
            raise ValueError(
                f"max_new_tokens={params.max_new_tokens} leaves no room for a prompt in "
                f"{self.name}'s context of {self.max_positions} tokens"
            )
        rows = [r[-room:] for r in self.encode_prompts(prompts, chat)]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out: list[str] = [""] * len(rows)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), seeded(params.seed), self.sampling_context():
                starts = range(0, len(order), self.batch_size)
                for start in progress(starts, f"generate {len(rows)}", unit="batch"):
                    chunk = order[start : start + self.batch_size]
                    ids, mask = self.left_pad([rows[i] for i in chunk])
                    new = self._decode(ids, mask, params)
                    texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
                    for i, text in zip(chunk, texts, strict=True):
                        out[i] = text
        finally:
            self.model.train(was_training)
        return out

    def logprobs(self, prompts: list[str], completions: list[str], chat: bool = True) -> np.ndarray:
        if len(prompts) != len(completions):
            raise ValueError("logprobs needs one completion per prompt")
        if not prompts:
            return np.zeros(0, dtype=np.float64)
        prompt_ids = self.encode_prompts(prompts, chat)
        completion_ids = self.tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        rows: list[tuple[list[int], int]] = []
        for p, c in zip(prompt_ids, completion_ids, strict=True):
            room = self.max_positions - len(c)
            if room < 1:
                raise ValueError(
                    f"a completion of {len(c)} tokens does not fit {self.name}'s context "
                    f"of {self.max_positions} tokens"
                )
            p = p[-room:]
            rows.append((p + list(c), len(p)))
        result = np.zeros(len(rows), dtype=np.float64)
        # length-sorted batches: little padding, and few positions whose logits are kept
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start : start + self.batch_size]
                    result[chunk] = self._score([rows[i] for i in chunk])
        finally:
            self.model.train(was_training)
        return result

    def _score(self, rows: list[tuple[list[int], int]]) -> np.ndarray:
        """Completion log-prob sums for right-padded rows of (ids, prompt length)."""
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, _) in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        # only the positions that predict a completion token get logits: a full batch of
        # vocabulary-wide logits over every prompt position is gigabytes for a judge prompt
        first = min(n_prompt for _, n_prompt in rows) - 1
        logits = self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            logits_to_keep=width - first,
        ).logits
        sums = np.zeros(len(rows), dtype=np.float64)
        for i, (row, n_prompt) in enumerate(rows):
            if len(row) == n_prompt:
                continue
            step = logits[i, n_prompt - 1 - first : len(row) - 1 - first].float().log_softmax(-1)
            target = torch.tensor(row[n_prompt:], device=step.device).unsqueeze(-1)
            sums[i] = step.gather(-1, target).sum().item()
        return sums

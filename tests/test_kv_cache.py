"""The decode loop's preallocated KV cache gives the samples transformers' own cache gives:
on a Llama (SmolLM2's architecture), on a Gemma 3 whose sliding-window layers keep their
own cache (the window shorter than the generation) and on one whose window holds the whole
generation (then preallocated too), in fp32 and under bf16 autocast (where the cache is
stored in bf16)."""

import pytest
import torch
from transformers import (
    DynamicCache,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
)

import benchmark.profiles.hf_generator as hf_generator
from benchmark.profiles.base import SamplingParams
from benchmark.profiles.hf_generator import HFGenerator, native_bf16
from benchmark.profiles.kv_cache import PreallocatedCache, PreallocatedLayer, WithinWindowLayer
from benchmark.profiles.tiny import TinyProfile

SIZES = {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4}
HEADS = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}


def llama():
    return LlamaForCausalLM(LlamaConfig(**SIZES, **HEADS))


def gemma(window: int = 4):
    """Sliding-window layers over ``window`` positions (4: the prompts are longer) between
    full ones."""
    layer_types = ["sliding_attention", "full_attention"] * 2
    config = Gemma3TextConfig(**SIZES, **HEADS, sliding_window=window, layer_types=layer_types)
    return Gemma3ForCausalLM(config)


def gemma_within_window():
    """A window longer than every prompt and its 12 new tokens (the tokenizer's ~12 ids)."""
    return gemma(window=64)


def transformers_cache(model, capacity, dtype):
    return DynamicCache(config=model.config)


@pytest.mark.parametrize("build", [llama, gemma, gemma_within_window])
@pytest.mark.parametrize("fast", [False, True])
def test_samples_are_those_of_transformers_own_cache(build, fast, monkeypatch):
    if fast and not native_bf16():
        pytest.skip("bf16 autocast sampling runs only where the CPU has native bf16")
    torch.manual_seed(0)
    model = build().eval()
    tokenizer = TinyProfile().generator().tokenizer  # ids below 512 in these prompts
    generator = HFGenerator(model, tokenizer, "toy", batch_size=3, fast_sampling=fast)
    prompts = ["the river", "a stone in the garden by the old wall", "music", "light and dark"]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=5)
    ours = generator.generate(prompts, params, chat=False)
    monkeypatch.setattr(hf_generator, "PreallocatedCache", transformers_cache)
    assert generator.generate(prompts, params, chat=False) == ours


def test_full_attention_layers_are_written_in_place_in_the_stored_dtype():
    model = gemma()
    cache = PreallocatedCache(model, capacity=6, dtype=torch.bfloat16)
    kinds = model.config.layer_types
    assert [isinstance(layer, PreallocatedLayer) for layer in cache.layers] == [
        kind == "full_attention" for kind in kinds
    ] and "sliding_attention" in kinds
    full = next(layer for layer in cache.layers if isinstance(layer, PreallocatedLayer))
    first = torch.randn(2, 2, 4, 8)
    keys, values = full.update(first, first + 1)
    assert keys.dtype == torch.bfloat16 and torch.equal(keys, first.to(torch.bfloat16))
    keys, _ = full.update(first[:, :, :2], first[:, :, :2])
    assert keys.shape[-2] == full.get_seq_length() == 4 + 2
    assert keys.data_ptr() == full._keys.data_ptr()  # a view of the one buffer: no copy
    with pytest.raises(ValueError, match="holds 6 positions"):
        full.update(first[:, :, :1], first[:, :, :1])


def test_a_sliding_layer_is_preallocated_only_where_its_window_holds_the_generation():
    kinds = gemma().config.layer_types
    for window, capacity in ((4, 6), (64, 64), (64, 65)):
        cache = PreallocatedCache(gemma(window), capacity=capacity, dtype=None)
        within = [isinstance(layer, WithinWindowLayer) for layer in cache.layers]
        assert within == [k == "sliding_attention" and capacity <= window for k in kinds]
        assert cache.is_sliding == [k == "sliding_attention" for k in kinds]
    with pytest.raises(ValueError, match="do not fit a window of 64"):
        WithinWindowLayer(65, None, sliding_window=64)

"""Fast sampling: bf16 autocast only where the CPU has native bf16, fp32 weights untouched."""

import torch

from benchmark.profiles.base import SamplingParams
from benchmark.profiles.hf_generator import HFGenerator, native_bf16, sampling_precision
from benchmark.profiles.tiny import TinyProfile


def test_sampling_precision_follows_the_cpu_and_the_flag():
    assert sampling_precision(False) == "fp32"
    assert sampling_precision(True) == ("bf16-autocast" if native_bf16() else "fp32")
    assert sampling_precision(True, device="cuda") == "fp32"


def test_fast_sampling_leaves_fp32_weights_and_is_seeded():
    tiny = TinyProfile().generator()
    model, tokenizer = tiny.model, tiny.tokenizer
    fast = HFGenerator(model, tokenizer, "tiny-fast", batch_size=4, fast_sampling=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0, seed=3)
    prompts = ["the river", "a stone in the garden", "music", "light"]
    first = fast.generate(prompts, params, chat=False)
    assert first == fast.generate(prompts, params, chat=False)
    assert all(isinstance(t, str) for t in first) and len(first) == 4
    after = model.state_dict()
    assert all(
        after[k].dtype == torch.float32 and torch.equal(after[k], v) for k, v in before.items()
    )

"""Paper 002's small on-device LMs: GPT-2 loss, save/load, padding, sampling, sizes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from benchmark.profiles.small_lms import (
    KINDS,
    SmallLM,
    SmallLMConfig,
    small_lm_config,
)

VOCAB, EOS, PAD = 50, 1, 0
TINY = {"embedding_size": 8, "hidden_size": 16, "num_heads": 2, "n_positions": 32}
ATOL = 1e-5


def tiny_model(kind: str, seed: int = 0) -> SmallLM:
    torch.manual_seed(seed)
    return SmallLM(small_lm_config(kind, VOCAB, EOS, PAD, **TINY)).eval()


def random_ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", KINDS)
def test_loss_is_gpt2_shifted_cross_entropy_ignoring_minus_100(kind):
    model = tiny_model(kind)
    ids = random_ids(3, 7)
    labels = ids.clone()
    labels[0, 4:] = -100
    labels[2, 1] = -100
    out = model(input_ids=ids, labels=labels)
    logp = torch.log_softmax(out.logits[:, :-1].double(), dim=-1)
    target = labels[:, 1:]
    keep = target != -100
    manual = -logp[keep].gather(-1, target[keep].unsqueeze(-1)).mean()
    assert out.logits.shape == (3, 7, VOCAB)
    assert keep.sum() == 3 * 6 - 3 - 1
    torch.testing.assert_close(out.loss.double(), manual, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_save_and_auto_load_round_trip(kind, tmp_path):
    model = tiny_model(kind)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert isinstance(loaded, SmallLM)
    assert loaded.config.kind == kind and loaded.config.pad_token_id == PAD
    ids = random_ids(2, 9)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=ATOL, rtol=0)


def test_init_is_deterministic_given_the_seed():
    for kind in KINDS:
        a, b, c = tiny_model(kind, 3), tiny_model(kind, 3), tiny_model(kind, 4)
        pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
        assert all(torch.equal(x, y) for x, y in pairs)
        assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
        assert float(a.lm_head.weight.detach().std()) == pytest.approx(0.02, rel=0.3)
        assert not a.lm_head.bias.any()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_leaves_valid_logits_unchanged(kind, side):
    model = tiny_model(kind)
    lengths = [6, 3, 1]
    rows = [random_ids(1, n, seed=10 + n)[0] for n in lengths]
    width = max(lengths) + 2  # every row padded, the longest one too
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        span = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
        ids[i, span], mask[i, span] = row, 1
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask).logits
        for i, row in enumerate(rows):
            alone = model(input_ids=row[None]).logits[0]
            assert torch.isfinite(batched[i]).all()
            torch.testing.assert_close(batched[i][mask[i].bool()], alone, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_generate_samples_the_requested_number_of_tokens(kind):
    model = tiny_model(kind)
    ids = random_ids(4, 3)
    torch.manual_seed(5)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        max_new_tokens=20,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    assert out.shape == (4, 3 + 20)
    assert torch.equal(out[:, :3], ids)
    assert ((out >= 0) & (out < VOCAB)).all()


def test_transformer_rejects_sequences_past_n_positions():
    model = tiny_model("transformer")
    model(random_ids(1, TINY["n_positions"]))
    with pytest.raises(ValueError, match="n_positions=32"):
        model(random_ids(1, TINY["n_positions"] + 1))


def test_paper_lstm_has_about_8_3m_parameters():
    v, e, h = 32000, 96, 670
    expected = (
        v * e  # embedding
        + 4 * h * (e + h)
        + 2 * 4 * h  # LSTM gates (PyTorch keeps two bias vectors)
        + h * e
        + e  # Dense(96)
        + e * v
        + v  # Dense(V), untied
    )
    torch.manual_seed(0)
    model = SmallLM(small_lm_config("lstm", v, EOS, PAD))
    assert sum(p.numel() for p in model.parameters()) == expected == 8_298_656
    assert 8_000_000 < expected < 8_600_000


def test_bad_kind_raises_value_error():
    with pytest.raises(ValueError, match="unknown small LM kind 'gru'"):
        small_lm_config("gru", VOCAB, EOS, PAD)
    with pytest.raises(ValueError, match="unknown small LM kind"):
        SmallLMConfig(kind="rnn")


def test_importing_twice_keeps_the_registration():
    # In a child process: a reload makes new classes, which must not leak into other tests.
    code = (
        "import importlib, torch; from transformers import AutoModelForCausalLM;"
        "import benchmark.profiles.small_lms as m; m = importlib.reload(m);"
        "c = m.small_lm_config('lstm', 50, 1, 0, embedding_size=8, hidden_size=16);"
        "assert isinstance(AutoModelForCausalLM.from_config(c), m.SmallLM)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

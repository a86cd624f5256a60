"""Shipped instrument weights: a build listed in shipped/index.json with a matching sha256
is used instead of a rebuild on a machine whose cache is empty; an unlisted or altered file
is ignored, never loaded."""

from __future__ import annotations

import shutil

import pytest
import torch
from test_pretraining import SPEC, corpus

from benchmark.profiles import pretraining, shipped
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.pretraining import corpus_key, pretrained_ondevice_lm
from benchmark.training import flat_params


@pytest.fixture
def shipped_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path / "shipped")
    monkeypatch.setattr(shipped, "INDEX", tmp_path / "shipped" / "index.json")
    return tmp_path / "shipped"


def test_a_listed_file_with_its_hash_is_found_and_an_altered_one_is_not(shipped_dir, tmp_path):
    source = tmp_path / "weights.pt"
    source.write_bytes(b"weights")
    assert shipped.shipped_file("public_start/x.pt") is None
    shipped.ship(source, "public_start/x.pt")
    assert shipped.shipped_file("public_start/x.pt") == shipped_dir / "public_start/x.pt"
    (shipped_dir / "public_start/y.pt").write_bytes(b"weights")  # present, not listed
    assert shipped.shipped_file("public_start/y.pt") is None
    (shipped_dir / "public_start/x.pt").write_bytes(b"weightz")
    assert shipped.shipped_file("public_start/x.pt") is None


def test_a_shipped_on_device_lm_is_used_on_a_machine_with_an_empty_cache(shipped_dir, monkeypatch):
    name = "shipped"
    built = flat_params(pretrained_ondevice_lm(corpus, SPEC, name).new_model(0))
    directory = cache_dir() / "ondevice" / f"{name}-{corpus_key(corpus(), SPEC)}"
    for file in ("params.pt", "tokenizer.json"):
        shipped.ship(directory / file, f"ondevice/{directory.name}/{file}")
    shutil.rmtree(directory)  # another machine: nothing cached

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt although a matching build was shipped")

    monkeypatch.setattr(pretraining, "_pretrain", no_rebuild)
    assert torch.equal(flat_params(pretrained_ondevice_lm(corpus, SPEC, name).new_model(0)), built)
    (shipped_dir / "ondevice" / directory.name / "params.pt").write_bytes(b"planted")
    with pytest.raises(AssertionError, match="rebuilt although"):
        pretrained_ondevice_lm(corpus, SPEC, name)  # an altered shipped file is not loaded

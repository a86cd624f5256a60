"""The instrument's identity: records carry the digest of the start model that measured them,
entries collect the digests of their seeds, and the digest tells two builds apart by a bit."""

import torch
from test_leaderboard import fake_records

from benchmark.instrument import instrument_section, weights_digest
from leaderboard.entries import build_entry, version_definition, version_of


def model(seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    return net.to(dtype)


def test_the_same_weights_give_the_same_digest_and_one_ulp_changes_it():
    a, b = model(), model()
    assert weights_digest(a) == weights_digest(b)
    with torch.no_grad():
        w = b[0].weight
        w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(float("inf")))
    assert weights_digest(a) != weights_digest(b)
    assert weights_digest(model(1)) != weights_digest(a)


def test_bf16_weights_are_hashed_bit_for_bit():
    a, b = model(dtype=torch.bfloat16), model(dtype=torch.bfloat16)
    assert weights_digest(a) == weights_digest(b) != weights_digest(model())


def test_a_record_names_its_start_only_when_a_metric_measures_from_it():
    calls = []

    def start():
        calls.append(1)
        return model()

    assert instrument_section(["fid", "mia"], start) == {}
    assert instrument_section(["next_token"], None) == {}
    assert not calls  # the start is not built for a record that does not use it
    assert instrument_section(["next_token", "fid"], start) == {
        "start_sha256": weights_digest(model())
    }


def test_an_entry_lists_every_start_its_seeds_were_measured_from(tmp_path):
    version = version_of(version_definition(["abc"], []))
    records = fake_records(tmp_path, 2.0, seeds=(0, 1))
    assert "instruments" not in build_entry(records, version)  # older records: no digest
    for record in records:
        record["instrument"] = {"start_sha256": "a" * 64}
    assert build_entry(records, version)["instruments"] == ["a" * 64]
    records[1]["instrument"] = {"start_sha256": "b" * 64}
    assert build_entry(records, version)["instruments"] == ["a" * 64, "b" * 64]

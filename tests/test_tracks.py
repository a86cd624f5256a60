"""Tracks: a paper's named rows run through a suite as signed entries of their own, every
track shown with its description, and the paper suites' protocol fixed where it matters
(paper 001's test size and zero-step row, paper 002's one-pass cohort)."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from test_leaderboard import fake_records, publish, summary_row

import methods  # noqa: F401  (registers the built-in adapters)
from benchmark.cli.main import cli
from leaderboard.catalog import SUITES
from leaderboard.comparisons import CLIENTS_AND_SEEDS, SEEDS_ONLY
from leaderboard.entries import build_entry, integrity_digest, version_definition
from leaderboard.schema import EntryError
from leaderboard.store import entry_files, query, rows_by_version, write_manifest, write_version
from leaderboard.suites import Variant, instrument, run_suite
from leaderboard.tables import build_table, render_text, role_of
from leaderboard.tracks import (
    TRACKS,
    TrackView,
    contrasts,
    format_contrast,
    render_tracks,
    suite_of,
    track_views,
)
from leaderboard.verify import verify_tree
from methods.dp_ftrl import EVERY_CLIENT, ftrl_noise, tree_schedule

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)


def test_variants_of_one_method_are_signed_rows_of_their_own(tmp_path):
    """Two named rows of one method at one ε (paper 001's ε = 8 with and without
    refinement) are two entries, neither replacing the other; each carries its row's
    name, verifies (its aggregate is rebuilt with the name) and is shown under it. A row
    its suite declares a control (paper 001's Pre., the bench's noise-free ceilings) is
    entered as one, so no table ranks it, and the role is signed with the entry."""
    variants = {
        "one_epoch": Variant("public_only", 0.0, {"public_epochs": 1}),
        "two_epochs": Variant("public_only", 0.0, {"public_epochs": 2}, role="control"),
    }
    suite = dataclasses.replace(
        SUITES["tiny"], metrics=(), methods=tuple(variants), variants=variants
    )
    results = tmp_path / "results"
    entries = run_suite(
        suite, results_root=results, runs_root=tmp_path / "runs", splits_root=tmp_path / "s"
    )
    assert sorted(e["variant"] for e in entries) == ["one_epoch", "two_epochs"]
    assert {e["method"]["name"] for e in entries} == {"public_only"}
    assert len(entry_files(results)) == 2  # the second did not supersede the first
    assert verify_tree(results, trust_host=True) == []
    assert sorted(r.method for r in query(results)) == ["one_epoch", "two_epochs"]
    roles = {e["variant"]: e["method"]["role"] for e in entries}
    assert roles == {"one_epoch": "bound", "two_epochs": "control"}
    assert {r.method: role_of(r) for r in query(results)} == roles  # what tables rank by
    with pytest.raises(EntryError, match="only a suite's variant"):
        build_entry([], "lb-x", control=True)
    edited = json.loads(entry_files(results)[0].read_text())
    edited["variant"] = "relabelled"  # relabelling a row breaks its digest and signature
    entry_files(results)[0].write_text(json.dumps(edited))
    assert verify_tree(results, trust_host=True)


def test_every_paper_row_resolves_to_its_method_and_budget():
    paper001, paper002 = SUITES["paper001"], SUITES["paper002"]
    zero = paper001.spec("control_zero_steps", math.inf, 0, Path("unused"))
    assert zero.method.name == "fed_ctg"
    # the prompt the fine-tuned rows sample from, with no fine-tuning: prompt vs stage 1
    assert zero.method.params["zero_shot_template"] == "{label}\n"
    assert zero.method.params["finetune"] is False
    assert paper001.spec("pre", math.inf, 0, Path("u")).method.params["zero_shot_template"] != (
        "{label}\n"
    )
    assert paper001.budgets("eps8_refinement") == (8.0,)
    assert paper001.contrasts["stage 1's own effect"] == ("eps_inf", "control_zero_steps")
    assert len(paper002.grid()) == 14 * 3
    row = paper002.spec("transformer_midtrain_distill_dm", 18.71, 0, Path("u"))
    assert row.method.params["cohort_size"] == EVERY_CLIENT
    assert row.method.params["model"] == "transformer"
    assert (row.privacy.epsilon, row.privacy.delta) == (18.71, 1e-6)


def test_paper001_split_sizes_the_test_set_for_a_two_point_binomial_se(tmp_path):
    """602 test texts: SE = √(p(1 − p)/n) ≤ 2 points up to an accuracy of 40 % (2.04 at
    50 %); δ = 1/(N ln N) for the split's own N train clients (fed_ctg's ``ln`` rule)."""
    from benchmark.split_storage import load_split
    from leaderboard.suites import ensure_split

    suite = SUITES["paper001"]
    split = load_split(ensure_split(suite, tmp_path))
    n_test = len(split.records("test"))
    train = len(split.by_client("train"))
    assert n_test >= 600 and math.sqrt(0.4 * 0.6 / n_test) <= 0.02
    assert suite.delta == pytest.approx(1 / (train * math.log(train)))


def test_every_client_cohorts_follow_the_population_at_the_same_noise(tmp_path):
    """The cohort follows from the population and the rounds (the pool shares out the
    N mod T left over: tests/test_pool.py); with single participation the accountant's σ
    for one tree of T leaves is the same whatever the cohort."""
    from model_methods_support import make_context

    assert tree_schedule(650, EVERY_CLIENT, 24) == (27, [24])
    assert tree_schedule(5816, EVERY_CLIENT, 24) == (242, [24])
    ctx = make_context(tmp_path, epsilon=18.71, delta=1e-6)
    assert ftrl_noise(ctx, tree_schedule(650, EVERY_CLIENT, 24)[1]) == pytest.approx(
        ftrl_noise(ctx, tree_schedule(650, 25, 24)[1])
    )
    with pytest.raises(ValueError, match="every_client"):
        tree_schedule(10, EVERY_CLIENT, 24)
    with pytest.raises(ValueError, match="cohort_size"):
        tree_schedule(10, "half", 2)


def _track_version(root: Path, suite_name: str) -> str:
    """A version defined as ``suite_name``'s (as a suite run writes it), split ``toy``."""
    suite = SUITES[suite_name]
    definition = version_definition(
        ["abc"], suite.metrics, suite.downstream, instrument(suite.profile)
    )
    version = write_version(root, definition)
    manifest = {"name": "toy", "version": "v-toy", "content_hash": "abc"}
    manifest |= {"source": {"name": suite.source}, "counts": {"train": {"clients": 12}}}
    write_manifest(root, version, "toy", manifest)
    return version


def test_show_prints_every_track_with_its_description(tmp_path):
    """Each track's newest version is found by its suite's definition; a track with none
    says it is not yet run; the quick smoke test comes last."""
    root = tmp_path / "results"
    version = _track_version(root, "quick")
    entry = build_entry(fake_records(tmp_path, 1.0, seeds=(0, 1, 2)), version)
    entry["split"]["name"] = "toy"
    entry["integrity"] = integrity_digest(entry)
    publish(root, entry)
    assert suite_of(root, version) == "quick"
    views = track_views(root, rows_by_version(root))
    assert [v.track.suite for v in views] == [t.suite for t in TRACKS]
    assert views[-1].track.suite == "quick" and views[-1].version == version
    assert "kjv: 12 train clients (toy)" in views[-1].description()
    result = CliRunner().invoke(
        cli, ["leaderboard", "show", "--results", str(root), "--mine", str(tmp_path / "no")]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    for track in TRACKS:
        assert f"== {track.title}: {track.measures}" in out
    assert out.count("Not yet run under the suite") == len(TRACKS) - 1
    assert "Privacy unit: user = one client of the split" in out
    assert "No entries yet" not in out
    assert out.index("== Text benchmark") < out.index("== Quick smoke test")


def test_a_new_version_without_entries_says_so_and_states_its_unit(tmp_path):
    """A suite's new version is the track's newest before any of its runs finish: the
    track names it, says it has no entries yet, and takes its unit from the manifest."""
    root = tmp_path / "results"
    version = _track_version(root, "bench")
    manifest = json.loads(next((root / version / "_manifests").glob("*.json")).read_text())
    manifest["privacy_unit"] = {"statement": "user = one chat participant, ≤ 16 spans each"}
    write_manifest(root, version, "toy", manifest)
    [view] = [v for v in track_views(root, rows_by_version(root)) if v.track.suite == "bench"]
    assert view.version == version and view.rows == []
    text = view.description()
    assert "Privacy unit: user = one chat participant, ≤ 16 spans each." in text
    assert f"No entries yet under this version ({version})." in text


def test_a_table_without_bounds_names_its_reference_rows_not_a_gap():
    base = summary_row("base_model", 0.0, [0.7] * 3, "bound", "win_rate.win_rate")
    policy = summary_row("dp_ft", 1.0, [0.6] * 3, "method", "win_rate.win_rate")
    header = render_text(build_table([base, policy], "toy"), ("", "")).splitlines()[0]
    assert "gap closed" not in header and "read methods against base_model" in header


def test_stage_one_effect_is_a_difference_paired_by_seed():
    metric = "classification.accuracy"
    a = summary_row("eps_inf", math.inf, [0.40, 0.42, 0.44], "method", metric)
    b = summary_row("control_zero_steps", math.inf, [0.35, 0.36, 0.40], "method", metric)
    for row in (a, b):
        row.entry["spec"] = {"seeds": [0, 1, 2]}
    (effect,) = contrasts(SUITES["paper001"], [a, b], metric)
    assert effect.difference == pytest.approx(0.05)  # (0.05 + 0.06 + 0.04) / 3
    # paired: t(2) · sd(0.05, 0.06, 0.04) / √3 = 4.303 · 0.01 / 1.732
    assert effect.ci_half == pytest.approx(4.3027 * 0.01 / math.sqrt(3), rel=1e-3)
    b.entry["spec"] = {"seeds": [1]}  # only the seeds both rows have are paired
    (one,) = contrasts(SUITES["paper001"], [a, b], metric)
    assert one.seeds == (1, 1) and one.ci_half is None
    assert "(paired by seed, 95% t over 1 seed)" in format_contrast(one)


def test_preference_policies_are_paired_by_seed_with_the_base_model_at_each_budget():
    """The base model (one row, ε = 0) is every policy's reference; two policies are
    compared only at a budget both have."""
    metric = "reward_accuracy.accuracy"
    rows = [
        summary_row("base_model", 0.0, [0.50, 0.50, 0.50], "bound", metric),
        summary_row("dp_ft", 1.0, [0.48, 0.50, 0.49], "method", metric),
        summary_row("dp_ft", 4.0, [0.47, 0.42, 0.50], "method", metric),
        summary_row("dpprefsyn", 1.0, [0.57, 0.54, 0.58], "method", metric),
    ]
    for row in rows:
        row.entry["spec"] = {"seeds": [0, 1, 2]}
    found = {
        (c.minuend, c.subtrahend, c.epsilon): c for c in contrasts(SUITES["prefs"], rows, metric)
    }
    assert set(found) == {
        ("dp_ft", "base_model", 1.0),
        ("dp_ft", "base_model", 4.0),
        ("dpprefsyn", "base_model", 1.0),
        ("dpprefsyn", "dp_ft", 1.0),
    }
    assert found["dp_ft", "base_model", 4.0].difference == pytest.approx(-0.11 / 3)
    # (0.09 + 0.04 + 0.09) / 3 against the ε = 1 DP-FT row, not the ε = 4 one
    assert found["dpprefsyn", "dp_ft", 1.0].difference == pytest.approx(0.22 / 3)
    # with DP-FT at ε = 4 only, DPPrefSyn at ε = 1 has nothing to be paired with
    only_four = [r for r in rows if (r.method, r.epsilon_budget) != ("dp_ft", 1.0)]
    pairs = {
        (c.minuend, c.subtrahend, c.epsilon) for c in contrasts(SUITES["prefs"], only_four, metric)
    }
    assert ("dpprefsyn", "dp_ft", 1.0) not in pairs and ("dpprefsyn", "base_model", 1.0) in pairs


def verdict_row(method, eps, verdicts, role):
    """A preference row whose seeds each judged every test tuple (``verdicts``: seeds ×
    tuples, in {0, ½, 1}), with its per-tuple hits kept as an entry keeps them."""
    hits = (2 * np.asarray(verdicts)).astype(int)
    values = [float(v) for v in np.asarray(verdicts).mean(axis=1)]
    row = summary_row(method, eps, values, role, "win_rate.win_rate")
    row.entry["spec"] = {"seeds": list(range(len(values)))}
    tokens = [2] * hits.shape[1]
    counts = {"clients_sha256": "e" * 64, "tokens": tokens, "win_rate_hits": hits.tolist()}
    row.entry["per_client"] = {"win_rate": {"test": counts}}
    return row


def test_a_preference_contrast_resamples_the_test_tuples_where_verdicts_were_kept():
    """Seeds that agree make the paired-by-seed t-interval ± 0, though 300 tuples decided
    it: the kept verdicts let the contrast resample them, and it says so."""
    rng = np.random.default_rng(0)
    base = rng.binomial(1, 0.25, size=300).astype(float)
    better = np.maximum(base, rng.binomial(1, 0.10, size=300))  # wins where base won, and more
    rows = [
        verdict_row("base_model", 0.0, [base] * 3, "bound"),
        verdict_row("dp_ft", 1.0, [better] * 3, "method"),
    ]
    (c,) = [c for c in contrasts(SUITES["prefs"], rows, "win_rate.win_rate") if c.epsilon == 1.0]
    assert c.basis == CLIENTS_AND_SEEDS and c.difference == pytest.approx(np.mean(better - base))
    assert c.ci_half > 0.01  # the tuples' spread, which seeds alone would call ± 0
    assert "paired 95% bootstrap over test clients and 3 seeds" in format_contrast(c)
    # a reference with fewer seeds: the text gives each row's count, not the smaller one
    rows[0] = verdict_row("base_model", 0.0, [base] * 2, "bound")
    (c,) = [c for c in contrasts(SUITES["prefs"], rows, "win_rate.win_rate") if c.epsilon == 1.0]
    assert c.seeds == (3, 2) and "over test clients and 3 and 2 seeds" in format_contrast(c)
    rows[0] = verdict_row("base_model", 0.0, [base] * 3, "bound")
    for row in rows:
        del row.entry["per_client"]
    (c,) = [c for c in contrasts(SUITES["prefs"], rows, "win_rate.win_rate") if c.epsilon == 1.0]
    assert c.basis == SEEDS_ONLY and c.ci_half == 0.0 and "paired by seed" in format_contrast(c)


def test_a_paper_track_prints_its_rows_descriptions_and_stage_one_effect():
    metric = "classification.accuracy"
    rows = [
        summary_row("eps_inf", math.inf, [0.40, 0.42, 0.44], "method", metric),
        summary_row("control_zero_steps", math.inf, [0.35, 0.36, 0.40], "method", metric),
    ]
    for row in rows:
        row.entry["spec"] = {"seeds": [0, 1, 2]}
        row.entry["privacy"] = {"unit": "client_sample", "unit_statement": "each client's own"}
    paper001 = next(t for t in TRACKS if t.suite == "paper001")
    text = render_tracks([TrackView(paper001, "lb-0123456789", rows, {"name": "toy"})])
    assert "Privacy unit: each client's own." in text
    assert (
        f"control_zero_steps: {SUITES['paper001'].variants['control_zero_steps'].description}"
        in text
    )
    assert "stage 1's own effect at ε=inf: eps_inf − control_zero_steps = +0.0500 ± 0.0248" in text


def test_a_track_without_a_ranked_cell_shows_its_highest_method_row_as_unranked():
    """The smoke test runs one seed by design: the index says none is ranked, why, and
    still shows its highest method row per ε with its seeds; a ranked cell replaces that."""
    from leaderboard.site import _best_cells

    top1 = "next_token.top1"
    rows = [
        summary_row("public_only", 0.0, [0.1], "bound", top1),
        summary_row("popri", 1.0, [0.17], metric=top1),
        summary_row("dp_fedavg", 1.0, [0.16], metric=top1),
    ]
    view = TrackView(TRACKS[-1], "lb-x", rows, {})
    cell = _best_cells(view)
    assert cell.startswith("none ranked") and "ε = 1: popri 0.1700 (1 of 3 seeds)" in cell
    assert "dp_fedavg" not in cell and "public_only" not in cell
    leaky = summary_row("pe_sft", 1.0, [0.2, 0.2, 0.2], metric=top1)
    leaky.entry["privacy"] = {"epsilon": 1.0, "delta": 1e-5}
    leaky.entry["audit"] = {"canary.epsilon_lower_bound": {"values": [4.0, 4.0, 4.0]}}
    cell = _best_cells(TrackView(TRACKS[-1], "lb-x", [*rows, leaky], {}))
    assert "ε = 1: pe_sft 0.2000 ± 0.0000 (its audit refutes ε)" in cell
    rows.append(summary_row("dp_ftrl", 1.0, [0.12, 0.13, 0.14], metric=top1))
    ranked = _best_cells(TrackView(TRACKS[-1], "lb-x", [*rows, leaky], {}))
    assert ranked.startswith("ε = 1: <b>dp_ftrl</b>") and "popri" not in ranked


def test_the_overview_prints_the_preference_tracks_co_headline_reward_accuracy():
    """`leaderboard show` with no options prints the win rate table and, beside it, the
    reward accuracy table (paper 003's co-headline), each with its CI."""
    rows = []
    for method, eps, wins, accuracy in (
        ("base_model", 0.0, [0.23, 0.24, 0.22], [0.5] * 3),
        ("dp_ft", 1.0, [0.20, 0.21, 0.21], [0.51, 0.49, 0.47]),
    ):
        row = summary_row(method, eps, wins, metric="win_rate.win_rate")
        accuracies = summary_row(method, eps, accuracy, metric="reward_accuracy.accuracy")
        row.entry["metrics"].update(accuracies.entry["metrics"])
        row.entry["privacy"] = {"unit": "sample", "unit_statement": "sample = one tuple"}
        row.entry["spec"] = {"seeds": [0, 1, 2]}
        rows.append(row)
    (track,) = [t for t in TRACKS if t.suite == "prefs"]
    out = render_tracks([TrackView(track, "lb-x", rows, {})])
    assert "win rate vs test chosen ↑" in out and "reward accuracy ↑" in out
    assert out.index("win rate vs test chosen") < out.index("reward accuracy ↑")
    assert "0.4900 ± 0.0497 (n=3)" in out
    # each table is followed by its own paired difference with the base model
    against_base = "DP-FT against the base model at ε=1: dp_ft − base_model = "
    wins, accuracies = (out.index(against_base + d) for d in ("-0.0233", "-0.0100"))
    assert out.index("win rate vs test chosen") < wins < out.index("reward accuracy ↑") < accuracies

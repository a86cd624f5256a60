"""Paired bootstrap intervals in leaderboard tables: per-client hits from records to entries
to `leaderboard show`, the seed-only fallback for entries without them, and ranking only
with three seeds."""

import json
import math

import numpy as np
import pytest

from benchmark.evaluation.stats import summarize
from leaderboard.client_hits import client_hits_of, entry_client_hits
from leaderboard.comparisons import CLIENTS_AND_SEEDS, SEEDS_ONLY, client_difference
from leaderboard.schema import validate_entry
from leaderboard.store import Row, labelled
from leaderboard.tables import BEST, build_table, render_text

METRIC = "next_token.top1"
CLIENTS = 400
TOKENS = np.random.default_rng(0).integers(20, 100, size=CLIENTS)
DIGEST = "a" * 64


def hits_for(level, seeds, rng):
    """Per-seed hits around ``level``, on clients that differ a lot in difficulty (shared by
    every row: the same seed for the difficulty draw). A seed moves the row's level a little
    (sd 0.002), as a run's randomness moves a model scored on fixed test texts."""
    difficulty = np.random.default_rng(1).uniform(-0.15, 0.15, size=CLIENTS)
    hits = rng.binomial(TOKENS, np.clip(level + difficulty, 0, 1))
    shifts = rng.normal(0.0, 0.002, size=seeds)
    return [np.clip(hits + np.rint(TOKENS * s).astype(int), 0, TOKENS).tolist() for s in shifts]


def row(method, eps, level=None, seeds=3, role=None, hits=None, digest=DIGEST, seed=0):
    rng = np.random.default_rng(seed)
    hits = hits if hits is not None else hits_for(level, seeds, rng)
    values = [sum(h) / int(TOKENS.sum()) for h in hits]
    entry = {
        "method": {"name": method, "config": {}, **({"role": role} if role else {})},
        "metrics": {METRIC: {**summarize(values).as_dict(), "values": values}},
        "per_client": {
            "next_token": {
                "test": {"clients_sha256": digest, "tokens": TOKENS.tolist(), "top1_hits": hits}
            }
        },
    }
    return Row("lb", "toy", method, eps, eps, "formal", f"{method}-{eps}.json", entry)


def without_hits(r):
    r.entry.pop("per_client")
    return r


def rows():
    return [
        row("public_only", 0.0, 0.30, role="bound", seed=1),
        row("nonprivate", float("inf"), 0.36, role="bound", seed=2),
        row("generator_only", 0.0, 0.28, role="control", seed=3),
        row("oracle", float("inf"), 0.34, role="control", seed=4),
        row("popri", 1.0, 0.31, role="method", seed=5),
        row("pe_sft", 1.0, 0.40, seeds=1, role="method", seed=6),  # best, but one seed
    ]


def test_intervals_are_paired_and_their_points_are_the_published_means():
    table = build_table(rows(), "toy", METRIC)
    popri = table.comparisons.cells["popri", 1.0]
    mean = {m: table.cells[m, e].mean for m, e in table.cells}
    assert popri.vs_public.basis == CLIENTS_AND_SEEDS
    assert popri.vs_public.interval.point == pytest.approx(mean["popri"] - mean["public_only"])
    assert popri.vs_generator.interval.point == pytest.approx(
        mean["popri"] - mean["generator_only"]
    )
    assert popri.gap.interval.point == pytest.approx(table.gap["popri", 1.0])
    for estimate in (popri.vs_public, popri.vs_generator, popri.gap):
        i = estimate.interval
        assert i.low < i.point < i.high
    assert popri.vs_generator.interval.low > 0  # 0.31 vs 0.28 on the same clients: resolved
    sep = table.comparisons.separation
    assert sep.basis == CLIENTS_AND_SEEDS and sep.ses_apart > 10
    assert sep.unpaired_se > 1.5 * sep.difference.se  # clients differ: pairing matters
    assert ("public_only", 0.0) not in table.comparisons.cells  # bounds are the references
    assert table.comparisons.cells["generator_only", 0.0].vs_generator is None


def test_a_cell_is_ranked_only_with_three_seeds():
    table = build_table(rows(), "toy", METRIC)
    assert table.few_seeds == {("pe_sft", 1.0)}
    assert table.best == {1.0: "popri"}  # pe_sft's 0.40 is shown, not ranked
    text = render_text(table, BEST)
    assert "[unranked: < 3 seeds]" in text and "1 (unranked)" in text
    assert "generator_only: control: the generator from public prompts" in text
    assert "public_only: bound: ε = 0 anchor" in text
    assert (
        "SEs apart paired (test clients resampled, each row's seed error drawn); unpaired SE"
        in text
    )
    popri_line = [line for line in text.splitlines() if line.startswith("popri ")][-1]
    assert popri_line.count("[") == 3 and "*" not in popri_line  # three intervals, all paired
    as_json = table.to_json()
    ranked = {r["method"]: r["eps=1"]["ranked"] for r in as_json["rows"] if "eps=1" in r}
    assert ranked == {"popri": True, "pe_sft": False}
    popri = next(r for r in as_json["rows"] if r["method"] == "popri")["eps=1"]["paired"]
    assert popri["minus_generator_only"]["basis"] == CLIENTS_AND_SEEDS
    assert as_json["bounds_separation"]["ses_apart"] > 10
    json.dumps(as_json)  # serialisable


def test_a_row_with_one_seed_gets_no_interval_though_it_kept_hits():
    # its seeds' variance is unknown: a client-only interval would read narrower than it is
    table = build_table(rows(), "toy", METRIC)
    one = table.comparisons.cells["pe_sft", 1.0]
    assert table.cells["pe_sft", 1.0].ci_half is None
    assert one.vs_public.interval.point == pytest.approx(
        table.cells["pe_sft", 1.0].mean - table.cells["public_only", 0.0].mean
    )
    assert math.isnan(one.vs_public.interval.low) and math.isnan(one.vs_generator.interval.low)
    assert one.gap is None
    public, pe_sft = rows()[0], rows()[5]
    assert client_difference(pe_sft, public, METRIC) is None  # a track's contrasts: the same
    line = [x for x in render_text(table, BEST).splitlines() if x.startswith("pe_sft ")][-1]
    assert line.count("[no CI] *") == 2


def test_a_cells_interval_counts_its_test_clients_as_well_as_its_seeds():
    # seeds that agree exactly: the t-interval over seeds is ± 0, yet 400 test clients
    # of differing difficulty leave the mean uncertain
    same = hits_for(0.30, 1, np.random.default_rng(1)) * 3
    flat = row("public_only", 0.0, hits=same, role="bound")
    assert flat.entry["metrics"][METRIC]["ci_high"] == flat.entry["metrics"][METRIC]["mean"]
    table = build_table([flat, *rows()[1:]], "toy", METRIC)
    cell = table.cells["public_only", 0.0]
    p = cell.mean
    binomial = 1.96 * math.sqrt(p * (1 - p) / int(TOKENS.sum()))  # tokens as if independent
    assert cell.basis == CLIENTS_AND_SEEDS and cell.ci_half > binomial
    as_json = next(r for r in table.to_json()["rows"] if r["method"] == "public_only")
    assert as_json["eps=0"]["ci95_basis"] == CLIENTS_AND_SEEDS
    text = render_text(table, ("", ""))
    assert "mean ± 95% CI half-width over test clients and n seeds;" in text
    # beside an entry without hits, whose interval stays the t over its seeds, marked
    mixed = build_table([flat, without_hits(rows()[4])], "toy", METRIC)
    assert mixed.cells["popri", 1.0].basis == SEEDS_ONLY
    popri_line = next(line for line in render_text(mixed).splitlines() if "popri" in line)
    assert " * (n=3)" in popri_line and "(* over seeds only)" in render_text(mixed)
    # piped, the best cell is marked by a word, and the columns still line up
    header, *lines = render_text(mixed, BEST).splitlines()[1:4]
    column = header.index("ε=1")
    assert [line[column - 2 : column] for line in lines] == ["  ", "  "]
    assert lines[1].rstrip().endswith("0.3058 ± 0.0000 * (n=3) [best]")


def test_entries_without_hits_fall_back_to_seed_intervals_marked():
    old = [without_hits(r) for r in rows()]
    table = build_table(old, "toy", METRIC)
    popri = table.comparisons.cells["popri", 1.0]
    assert popri.vs_public.basis == SEEDS_ONLY and popri.gap is None
    assert table.comparisons.separation.basis == SEEDS_ONLY
    text = render_text(table, ("", ""))
    assert "over seeds only *" in text
    popri_line = [line for line in text.splitlines() if line.startswith("popri ")][-1]
    assert popri_line.count(" *") == 2  # both differences marked as seed-only
    assert popri_line.count("[no CI]") == 2  # these seeds agree, and there are no hits
    # one seed against a public start without seed variance: a difference, no interval
    same = hits_for(0.30, 1, np.random.default_rng(1)) * 3
    flat = [without_hits(row("public_only", 0.0, hits=same, role="bound")), old[-1]]
    assert "[no CI] *" in render_text(build_table(flat, "toy", METRIC), ("", ""))
    # another client list (another split build): not paired either
    mixed = rows()
    mixed[4] = row("popri", 1.0, 0.31, role="method", seed=5, digest="b" * 64)
    assert build_table(mixed, "toy", METRIC).comparisons.cells["popri", 1.0].vs_public.basis == (
        SEEDS_ONLY
    )


def test_a_store_with_its_own_bounds_is_compared_with_them():
    yours = labelled(
        [
            row("public_only", 0.0, 0.20, role="bound", seed=7),
            row("nonprivate", float("inf"), 0.26, role="bound", seed=8),
            row("popri", 1.0, 0.23, role="method", seed=9),
        ],
        "yours",
    )
    table = build_table(rows() + yours, "toy", METRIC)
    cell = table.comparisons.cells["popri (yours)", 1.0]
    mean = {m: table.cells[m, e].mean for m, e in table.cells}
    assert cell.vs_public.interval.point == pytest.approx(
        mean["popri (yours)"] - mean["public_only (yours)"]
    )
    # no generator_only of its own: the published one
    assert cell.vs_generator.interval.point == pytest.approx(
        mean["popri (yours)"] - mean["generator_only"]
    )


def record(seed, hits, tokens, top1=None, digest=DIGEST):
    top1 = sum(hits) / sum(tokens) if top1 is None else top1
    counts = {"clients_sha256": digest, "tokens": tokens, "top1_hits": hits}
    return {
        "spec": {"seed": seed},
        "metrics": {"next_token.top1": top1},
        "evaluation": {"metrics": {"next_token": {"top1": top1, "per_client": {"test": counts}}}},
    }


def test_entries_keep_per_client_hits_only_when_every_seed_scored_the_same_clients():
    records = [record(0, [1, 2], [4, 4]), record(1, [2, 2], [4, 4])]
    kept = entry_client_hits(records)
    assert kept["per_client"]["next_token"]["test"]["top1_hits"] == [[1, 2], [2, 2]]
    entry = {"per_client": kept["per_client"]}
    digest, hits = client_hits_of(entry, METRIC)
    assert digest == DIGEST and hits.per_seed().tolist() == [3 / 8, 4 / 8]
    assert client_hits_of(entry, "next_token.top3") is None
    # seeds that scored other tokens of the same clients keep their tokens per seed
    per_seed = entry_client_hits([record(0, [1, 2], [4, 4]), record(1, [2, 2], [4, 5])])
    assert per_seed["per_client"]["next_token"]["test"]["tokens"] == [[4, 4], [4, 5]]
    assert client_hits_of(per_seed, METRIC)[1].per_seed().tolist() == [3 / 8, 4 / 9]
    assert entry_client_hits([record(0, [1, 2], [4, 4], top1=0.5)]) == {}  # not the published
    assert entry_client_hits([record(0, [1], [4]), record(1, [1], [4], digest="c" * 64)]) == {}
    old = {"spec": {"seed": 0}, "metrics": {"next_token.top1": 0.5}, "evaluation": {"metrics": {}}}
    assert entry_client_hits([old]) == {}


def test_an_entry_built_from_records_keeps_them_and_the_schema_checks_them():
    from pathlib import Path

    from leaderboard.entries import build_entry
    from leaderboard.schema import EntryError

    kept = Path(__file__).parents[1] / "results/lb-06741a6a58/chitchat-v-46c5253d2d1f/_records"
    records = [json.loads(p.read_text()) for p in sorted(kept.glob("*__public_only__*"))]
    assert len(records) == 3
    for r in records:  # split each seed's published counts over two clients
        tokens = int(r["metrics"]["next_token.test_tokens"])
        hits = round(r["metrics"]["next_token.top1"] * tokens)
        counts = {
            "clients_sha256": DIGEST,
            "tokens": [tokens - 100, 100],
            "top1_hits": [hits - 7, 7],
        }
        r["evaluation"]["metrics"]["next_token"]["per_client"] = {"test": counts}
    entry = build_entry(records, "lb-0123456789")
    validate_entry(entry)
    digest, hits = client_hits_of(entry, METRIC)
    assert hits.point() == entry["metrics"][METRIC]["mean"]
    entry["per_client"]["next_token"]["test"]["tokens"] = [4, -1]
    with pytest.raises(EntryError, match="per_client"):
        validate_entry(entry)


def test_a_divergence_ranks_its_smallest_value_first():
    """MAUVE's frontier integral is a divergence from the real texts: lower is better."""
    pair = [row(name, 1.0, 0.3, role="method", seed=i) for i, name in enumerate(("a", "b"))]
    for r, value in zip(pair, (0.2, 0.5), strict=True):
        r.entry["metrics"]["mauve.frontier_integral"] = {
            **summarize([value] * 3).as_dict(),
            "values": [value] * 3,
        }
    assert build_table(pair, "toy", "mauve.frontier_integral").best == {1.0: "a"}

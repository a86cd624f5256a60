"""Leaderboard: entries over seeds, verification (incl. tampering), tables, site in Chromium."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from doubles import StubProfile, make_split

from benchmark.cli.main import cli
from benchmark.evaluation.stats import summarize
from benchmark.runner import run
from benchmark.spec import spec_from_dict
from leaderboard.entries import build_entry, version_definition, version_of
from leaderboard.schema import EntryError
from leaderboard.signing import host_key, key_id, sign_entry
from leaderboard.site import _headline_table, write_site
from leaderboard.store import (
    Row,
    entry_files,
    labelled,
    query,
    read_entry,
    versions,
    write_entry,
    write_manifest,
    write_version,
)
from leaderboard.store_index import update_index
from leaderboard.tables import BEST, build_table, format_cell, metric_label, render_text
from leaderboard.verify import verify_tree

METRIC = "toy.score"


def fake_records(tmp_path, eps, seeds, params=None):
    records = []
    for seed in seeds:
        spec = spec_from_dict(
            {
                "split": {"path": "unused"},
                "method": {"name": "test_noisy_rounds", "params": params or {}},
                "privacy": {"epsilon": eps, "delta": 1e-5},
                "seed": seed,
            }
        )
        record = run(
            spec, runs_root=tmp_path / "runs", profile=StubProfile(), split=make_split()
        ).record
        history = json.loads(run_artifact_text(tmp_path, record))
        record["metrics"] = {
            METRIC: 0.5 + 0.01 * seed + (0.1 if eps > 1 else 0.0) + 0 * len(history)
        }
        records.append(record)
    return records


def run_artifact_text(tmp_path, record):
    return (tmp_path / "runs" / record["run_key"] / "artifact.json").read_text() and json.dumps(
        json.loads((tmp_path / "runs" / record["run_key"] / "artifact.json").read_text())["texts"]
    )


def publish(root, entry):
    """Write an entry as the harness does: signed with the host key (the session's, in
    tests) and listed in the store's signed index."""
    key = host_key(root)
    path = write_entry(root, sign_entry(entry, key))
    described = [*root.glob("lb-*/_version.json"), *root.glob("lb-*/_manifests/*.json")]
    update_index(root, key, {key_id(key.public_key()): key.public_key()}, [path, *described])
    return path


def verify(root, hashes=None):
    """verify_tree as the store's owner runs it: the host (session) key trusted."""
    return verify_tree(root, hashes, trust_host=True)


EDITED = "edited: not the content the store's signed index lists"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Two signed entries (ε = 1 and 4, three seeds each): six real runs, made once."""
    base = tmp_path_factory.mktemp("published")
    root = base / "results"
    version = version_of(version_definition(["abc"], [{"name": "toy"}]))
    write_manifest(root, version, "toy", {"version": "v-test", "content_hash": "abc"})
    for eps in (1.0, 4.0):
        publish(root, build_entry(fake_records(base, eps, seeds=(0, 1, 2)), version))
    return root


@pytest.fixture
def store(published, tmp_path):
    """The published store, copied for each test (several tamper with it)."""
    return Path(shutil.copytree(published, tmp_path / "results"))


def test_entry_summarises_seeds(store):
    rows = query(store)
    assert len(rows) == 2
    summary = rows[0].entry["metrics"][METRIC]
    assert summary["n"] == 3 and summary["values"] == [0.5, 0.51, 0.52]
    assert summary["ci_low"] < summary["mean"] < summary["ci_high"]
    assert rows[0].entry["spec"]["seeds"] == [0, 1, 2]


def test_a_new_split_or_metric_definition_starts_a_new_version():
    base = version_of(version_definition(["abc"], [{"name": "toy"}]))
    assert base == version_of(version_definition(["abc"], [{"name": "toy"}], {}))
    changed = [
        version_of(version_definition(["abd"], [{"name": "toy"}])),
        version_of(version_definition(["abc"], [{"name": "toy", "settings": {"n": 2}}])),
        version_of(version_definition(["abc"], [{"name": "toy"}], {"model_samples": 64})),
        # a new downstream model is a new instrument: its numbers are not comparable
        version_of(version_definition(["abc"], [{"name": "toy"}], {}, {"ondevice_lm": "b"})),
        # a profile variant (another generator): a table shows one row per method
        version_of(version_definition(["abc"], [{"name": "toy"}], {}, None, "cpu-gemma")),
    ]
    assert len({base, *changed}) == 6


def test_the_bench_under_cpu_gemma_is_a_version_of_its_own_and_under_cpu_the_published_one():
    import dataclasses

    from leaderboard.catalog import get_suite
    from leaderboard.suites import suite_version

    bench = get_suite("bench")
    split_hash = "c5e73d236ec001ddc7eb8739e6e6832b363be2aa1f51b89a6e1226c257fb28cb"
    under_cpu = suite_version(dataclasses.replace(bench, profile="cpu"), split_hash)
    assert version_of(under_cpu) == "lb-b5ee9626d0"  # bench v3's, committed under cpu
    assert version_of(suite_version(bench, split_hash)) != "lb-b5ee9626d0"
    assert suite_version(bench, split_hash) == {**under_cpu, "profile_variant": "cpu-gemma"}


def test_newest_version_is_shown_and_old_versions_stay_browsable(store, tmp_path):
    old = query(store)[0].leaderboard_version  # undescribed: from before versions were
    newer = write_version(store, version_definition(["abc"], [{"name": "newer"}]))
    publish(store, build_entry(fake_records(tmp_path, 2.0, seeds=(0,)), newer))
    assert versions(store) == [old, newer]
    assert [r.leaderboard_version for r in query(store)] == [newer]
    assert len(query(store, version=old)) == 2
    assert verify(store) == []
    definition = store / newer / "_version.json"
    definition.write_text(definition.read_text().replace("newer", "edited"))
    problems = verify(store)
    assert {path for path, _ in problems} == {definition}
    assert any("hashes to" in problem for _, problem in problems)


def test_verify_passes_then_rejects_tampered_copies(store):
    assert verify(store, {"v-test": "abc"}) == []
    path = entry_files(store)[0]
    entry = json.loads(path.read_text())

    entry["metrics"][METRIC]["mean"] = 0.99  # a better score typed in by hand
    path.write_text(json.dumps(entry))
    [(bad, reason), (_, edited)] = verify(store, {"v-test": "abc"})
    assert bad == path and "integrity digest mismatch" in reason and edited == EDITED

    command = ["leaderboard", "verify", "--results", str(store), "--trust-host"]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code != 0 and "REJECTED" in result.output


def test_verify_recomputes_epsilon_from_ledger(store):
    from leaderboard.entries import integrity_digest

    path = entry_files(store)[0]
    entry = json.loads(path.read_text())
    entry["privacy"]["epsilon"] = 0.01  # claims less privacy loss; digest recomputed to match
    entry["integrity"] = integrity_digest(entry)
    path.write_text(json.dumps(entry))
    [(_, unsigned), (_, edited)] = verify(store, {"v-test": "abc"})
    assert "does not verify" in unsigned and edited == EDITED  # the signature first
    publish(store, {k: v for k, v in entry.items() if k != "signature"})  # even when signed
    [(_, reason)] = verify(store, {"v-test": "abc"})
    assert "recomputed from the stored ledgers" in reason


def test_verify_rejects_an_uncharged_release_in_a_formal_entry(store):
    from leaderboard.entries import integrity_digest

    path = entry_files(store)[0]
    entry = json.loads(path.read_text())
    uncharged = {
        "mechanism": "uncharged",
        "noise_multiplier": 0.0,
        "sensitivity": 1.0,
        "sample_rate": 1.0,
        "count": 1,
        "label": "histogram",
    }
    entry["privacy"]["ledgers"][0].append(uncharged)  # ε unchanged: it adds nothing
    entry["integrity"] = integrity_digest(entry)
    publish(store, {k: v for k, v in entry.items() if k != "signature"})  # signed, even
    [(_, reason)] = verify(store, {"v-test": "abc"})
    assert "guarantee simulated, not formal" in reason


def test_verify_checks_manifest_hash(store):
    [(_, reason), _] = verify(store, {"v-test": "different"})
    assert "manifest hash different" in reason


def test_unreadable_entry_is_refused(tmp_path, store):
    path = tmp_path / "lb-0123456789" / "toy" / "entry.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(EntryError, match="schema"):
        read_entry(path)
    # beside the published store (--mine): its file and what is wrong, not a traceback
    args = ["leaderboard", "show", "--results", str(store), "--mine", str(tmp_path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and f"Error: {path}: schema:" in result.output


def test_table_and_cli_show(store):
    table = build_table(query(store), "toy", METRIC)
    assert table.epsilons == [1.0, 4.0]
    text = render_text(table, BEST)
    # mean ± 95% t-interval half-width over the 3 seeds (0.50, 0.51, 0.52): 4.303 * 0.01 / √3
    assert "0.5100 ± 0.0248 (n=3) [best]" in text and "0.6100 ± 0.0248 (n=3) [best]" in text
    assert table.roles == {"test_noisy_rounds": "method"}
    result = CliRunner().invoke(
        cli, ["leaderboard", "show", "--results", str(store), "--metric", METRIC, "--json"]
    )
    assert result.exit_code == 0, result.output
    [table_json] = json.loads(result.output)
    assert table_json["rows"][0]["eps=4"]["mean"] == pytest.approx(0.61)
    assert table_json["rows"][0]["eps=4"]["seeds"] == 3


def summary_row(method, eps, values, role=None, metric=METRIC):
    entry = {
        "method": {"name": method, "config": {}, **({"role": role} if role else {})},
        "metrics": {metric: {**summarize(values).as_dict(), "values": values}},
    }
    return Row("lb", "toy", method, eps, eps, "formal", f"{method}-{eps}.json", entry)


def test_rows_follow_the_suites_order_within_their_role():
    """A paper's variants read in its table's order (``leaderboard show`` passes the suite's
    rows); rows the order does not name follow, by name, and roles still come first."""
    rows = [summary_row(m, 8.0, [0.3]) for m in ("eps8", "pre", "zeta", "control", "alpha")]
    rows.append(summary_row("public_only", 0.0, [0.1], "bound"))
    table = build_table(rows, "toy", METRIC, order=["pre", "control", "eps8"])
    assert table.methods == ["public_only", "pre", "control", "eps8", "alpha", "zeta"]
    assert build_table(rows, "toy", METRIC).methods[1:] == [
        "alpha",
        "control",
        "eps8",
        "pre",
        "zeta",
    ]


def test_gap_closed_uses_each_stores_own_bounds_else_the_published_ones():
    published = [
        summary_row("public_only", 0.0, [0.10]),  # an entry from before roles: still a bound
        summary_row("nonprivate", float("inf"), [0.20], "bound"),
        summary_row("oracle", float("inf"), [0.18], "control"),
        summary_row("popri", 1.0, [0.15] * 3, "method"),  # ranked: three seeds
        summary_row("dp_ftrl", 1.0, [0.0999], "method"),  # a hair below the public start
    ]
    yours = labelled(
        [
            summary_row("public_only", 0.0, [0.30], "bound"),
            summary_row("nonprivate", float("inf"), [0.50], "bound"),
            summary_row("popri", 1.0, [0.40] * 3, "method"),
        ],
        "yours",
    )
    submission = labelled([summary_row("mine", 1.0, [0.12], "method")], "submitted")
    table = build_table(published + yours + submission, "toy", METRIC)
    assert table.gap[("popri", 1.0)] == pytest.approx(0.5)
    assert table.gap[("popri (yours)", 1.0)] == pytest.approx(0.5)  # its own bounds' scale
    assert table.gap[("mine (submitted)", 1.0)] == pytest.approx(0.2)  # the published scale
    assert table.roles["public_only"] == "bound" and table.roles["oracle"] == "control"
    assert table.best == {1.0: "popri (yours)"}  # controls and bounds are never ranked
    assert table.methods[:2] == ["nonprivate", "nonprivate (yours)"]
    text = render_text(table, BEST)
    assert "gap 50%" in text and "gap 20%" in text and "gap 100%" not in text  # bounds: no gap
    assert "gap 0%" in text and "-0%" not in text


def test_a_row_under_another_privacy_unit_is_shown_apart_and_never_ranked():
    sample_level = summary_row("fed_ctg", 1.0, [0.90] * 3, "method")
    sample_level.entry["privacy"] = {"unit": "client_sample"}
    popri = summary_row("popri", 1.0, [0.15] * 3, "method")
    table = build_table([popri, sample_level], "toy", METRIC)
    assert table.methods == ["fed_ctg [client_sample]", "popri"]
    assert table.best == {1.0: "popri"}  # 0.90 under a weaker unit does not win


def test_a_row_measured_with_another_instrument_build_is_not_placed_on_the_bounds():
    def measured(row, digest):
        row.entry["instruments"] = [digest]
        return row

    published = [
        measured(summary_row("public_only", 0.0, [0.10], "bound"), "a"),
        measured(summary_row("nonprivate", float("inf"), [0.20], "bound"), "a"),
        measured(summary_row("popri", 1.0, [0.15] * 3, "method"), "a"),
    ]
    same = labelled([measured(summary_row("mine", 1.0, [0.12] * 3, "method"), "a")], "same")
    other = labelled([measured(summary_row("yours", 1.0, [0.19] * 3, "method"), "b")], "other")
    table = build_table(published + same + other, "toy", METRIC)
    assert "yours (other) [other instrument]" in table.methods
    assert table.gap[("mine (same)", 1.0)] == pytest.approx(0.2)
    assert ("yours (other) [other instrument]", 1.0) not in table.gap
    assert ("yours (other) [other instrument]", 1.0) not in table.comparisons.cells
    assert table.best == {1.0: "popri"}  # 0.19 from another build does not win
    shown = published + same + other
    for row in shown:
        row.entry["spec"] = {"seeds": [0, 1, 2]}
    links = {(f"{r.store}/{r.path}" if r.store else r.path): "entry.json" for r in shown}
    page = _headline_table("toy", shown, METRIC, links)
    assert "yours (other) [other instrument]" in page  # the site names it as the table does
    # with its own bounds of that build, a store's rows are placed on them
    own = labelled(
        [
            measured(summary_row("public_only", 0.0, [0.11], "bound"), "b"),
            measured(summary_row("nonprivate", float("inf"), [0.21], "bound"), "b"),
            measured(summary_row("yours", 1.0, [0.19] * 3, "method"), "b"),
        ],
        "other",
    )
    table = build_table(published + own, "toy", METRIC)
    assert table.gap[("yours (other)", 1.0)] == pytest.approx(0.8)


def test_whole_number_quantities_print_without_decimals_and_labels_carry_directions():
    epochs = build_table([summary_row("popri", 1.0, [3.0, 3.0, 3.0], "method", "e")], "toy", "e")
    assert format_cell(epochs.cells["popri", 1.0]) == "3 ± 0"
    # epochs 3 and 4: mean 3.5, t(1) half-width 12.706 * 0.7071 / √2 = 6.4
    mixed = build_table([summary_row("p", 1.0, [3.0, 4.0], "method", "e")], "toy", "e")
    assert format_cell(mixed.cells["p", 1.0]) == "3.5 ± 6.4"
    fraction = build_table([summary_row("p", 1.0, [0.25])], "toy", METRIC)
    assert format_cell(fraction.cells["p", 1.0]) == "0.2500"
    assert metric_label("next_token.top1") == "next-token top-1 ↑"
    assert metric_label("next_token.ce") == "cross-entropy (nats) ↓"
    assert metric_label("next_token.selected_epoch") == "selected epoch"
    assert metric_label("mia.n_members") == "mia.n_members"


def chromium_driver():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    if not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()):
        pytest.fail("Debian chromium + chromium-driver are required (make test installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def test_site_renders_and_sorts_in_headless_chromium(store, tmp_path):
    from selenium.webdriver.common.by import By

    old = query(store)[0].leaderboard_version
    newer = write_version(store, version_definition(["abc"], [{"name": "newer"}]))
    publish(store, build_entry(fake_records(tmp_path, 2.0, seeds=(0,)), newer))
    site = tmp_path / "site"
    result = CliRunner().invoke(
        cli,
        [
            "leaderboard",
            "site",
            "--results",
            str(store),
            "--mine",
            str(tmp_path / "mine"),
            "--out",
            str(site),
            "--metric",
            METRIC,
        ],
    )
    assert result.exit_code == 0, result.output
    driver = chromium_driver()
    try:
        driver.get((site / "index.html").as_uri())  # the newest version, one entry
        assert newer in driver.title
        assert len(driver.find_elements(By.CSS_SELECTOR, "table.headline tbody tr")) == 1
        driver.find_element(By.LINK_TEXT, old).click()  # an old version stays browsable
        assert old in driver.title
        table = driver.find_element(By.CSS_SELECTOR, "table.headline[data-split=toy]")
        rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
        assert len(rows) == 2
        headers = [th.text for th in table.find_elements(By.TAG_NAME, "th")]
        column = headers.index(f"{METRIC} ↑ (mean ± 95% CI)")

        def column_values():
            cells = table.find_elements(By.CSS_SELECTOR, f"tbody tr td:nth-child({column + 1})")
            return [float(c.get_attribute("data-value")) for c in cells]

        header = table.find_elements(By.TAG_NAME, "th")[column]
        header.click()
        ascending = column_values()
        header.click()
        descending = column_values()
        assert ascending == sorted(ascending) and descending == sorted(descending, reverse=True)
        assert ascending != descending
        assert driver.find_elements(By.CSS_SELECTOR, "svg.plot[data-split=toy]")
        link = rows[0].find_element(By.LINK_TEXT, "json").get_attribute("href")
        assert json.loads(Path(link.removeprefix("file://")).read_text())["entry_key"]
    finally:
        driver.quit()
    shutil.rmtree(site)


def test_site_describes_the_split_and_escapes_what_it_prints(store, tmp_path):
    version = query(store)[0].leaderboard_version
    manifest = {
        "name": "toy",
        "version": "v-test",
        "content_hash": "abc",
        "source": {"name": "<toy>", "revision": "r1", "description": "a & b"},
        "counts": {p: {"clients": 1200, "samples": 2400} for p in ("train", "test")},
        "filters": {"date_window": {"start": "2018-05-01", "end": None, "field": "date"}},
        "public": {"rule": "before:2018-05-01", "max": 5000},
    }
    write_manifest(store, version, "toy", manifest)
    page = (write_site(store, tmp_path / "site", METRIC)).read_text()
    assert "<b>&lt;toy&gt;</b> (r1): a &amp; b. 1,200 train clients / 2,400 samples" in page
    assert "private window 2018-05-01 to … on date" in page
    assert "public part: before:2018-05-01 (at most 5,000 samples)" in page
    assert page.index('table class="sortable headline"') < page.index('<svg class="plot"')
    assert page.index('<svg class="plot"') < page.index('table class="sortable audit"')


def test_premia_is_an_audit_and_fills_the_mia_column(tmp_path):
    """Paper 003's PREMIA AUC sits in the audit block, in the column of the MIA AUC."""
    from leaderboard.site import _audit_table

    records = fake_records(tmp_path, 1.0, seeds=(0, 1))
    for record, auc in zip(records, (0.61, 0.63), strict=True):
        record["metrics"]["premia.auc"] = auc
    entry = build_entry(records, "lb-0123456789")
    assert entry["audit"]["premia.auc"]["values"] == [0.61, 0.63]
    assert "premia.auc" not in entry["metrics"] and METRIC in entry["metrics"]
    row = Row("lb-0123456789", "toy", entry["method"]["name"], 1.0, 1.0, "formal", "p", entry)
    table = _audit_table("toy", [row])
    assert "MIA loss AUC" in table and "0.620" in table
    shown = build_table([row], "toy", "premia.auc")  # `leaderboard show --metric premia.auc`
    assert [c.mean for c in shown.cells.values()] == [pytest.approx(0.62)]


def test_an_entry_whose_canary_audit_refutes_its_epsilon_is_flagged(tmp_path):
    from leaderboard.entries import audit_exceeds_epsilon
    from leaderboard.site import _audit_table

    records = fake_records(tmp_path, 1.0, seeds=(0, 1))
    for record, bound in zip(records, (0.2, 1.7), strict=True):  # seed 1 shows ε ≥ 1.7
        record["metrics"]["canary.epsilon_lower_bound"] = bound
    entry = build_entry(records, "lb-0123456789")
    assert "canary.epsilon_lower_bound" in entry["audit"] and audit_exceeds_epsilon(entry)
    row = Row("lb-0123456789", "toy", entry["method"]["name"], 1.0, 1.0, "formal", "p", entry)
    assert "flagged" in _audit_table("toy", [row]) and "refutes the ledger" in _audit_table(
        "toy", [row]
    )
    table = build_table([row], "toy", METRIC)
    assert table.flagged == {(row.method, 1.0)} and table.best == {}  # shown, never ranked
    assert "[audit refutes the ledger's ε]" in render_text(table, ("", ""))
    records[1]["metrics"]["canary.epsilon_lower_bound"] = 0.9
    honest = build_entry(records, "lb-0123456789")
    assert not audit_exceeds_epsilon(honest)
    assert "flagged" not in _audit_table("toy", [replace(row, entry=honest)])


def test_a_preference_split_shows_reward_accuracy_beside_the_win_rate(tmp_path):
    """Reward accuracy (no judge between it and the policy) is a co-headline of the win
    rate: the site and ``leaderboard show`` give each its own table; a split without it
    shows the headline alone."""
    from leaderboard.tables import headline_metrics

    records = fake_records(tmp_path, 1.0, seeds=(0, 1))
    for record, rate, acc in zip(records, (0.4, 0.6), (0.55, 0.65), strict=True):
        record["metrics"] = {"win_rate.win_rate": rate, "reward_accuracy.accuracy": acc}
    entry = build_entry(records, "lb-0123456789")
    prefs = Row("lb-0123456789", "prefs", entry["method"]["name"], 1.0, 1.0, "formal", "p", entry)
    assert headline_metrics([prefs], "prefs") == ["win_rate.win_rate", "reward_accuracy.accuracy"]
    alone = json.loads(json.dumps(entry))
    del alone["metrics"]["reward_accuracy.accuracy"]
    assert headline_metrics([replace(prefs, entry=alone)], "prefs") == ["win_rate.win_rate"]
    root = tmp_path / "results"
    publish(root, entry)
    write_manifest(root, "lb-0123456789", entry["split"]["name"], entry["split"] | {"version": "v"})
    page = write_site(root, tmp_path / "site").read_text()
    assert "win rate vs test chosen ↑ (mean ± 95% CI)" in page
    assert "reward accuracy ↑ (mean ± 95% CI)" in page and "0.6000" in page


def test_each_split_leads_with_its_own_headline_metric(tmp_path):
    """A preference split (paper 003) has no next-token accuracy: its table and plot lead
    with the win rate; a text split keeps next-token top-1; --metric overrides both."""
    from leaderboard.tables import headline_metric

    records = fake_records(tmp_path, 1.0, seeds=(0, 1))
    for record, rate in zip(records, (0.4, 0.6), strict=True):
        record["metrics"] = {"win_rate.win_rate": rate, "next_token_like.top1": 0.1}
    entry = build_entry(records, "lb-0123456789")
    prefs = Row("lb-0123456789", "prefs", entry["method"]["name"], 1.0, 1.0, "formal", "p", entry)
    text_entry = json.loads(json.dumps(entry))
    text_entry["metrics"]["next_token.top1"] = text_entry["metrics"].pop("win_rate.win_rate")
    text = replace(prefs, split="text", entry=text_entry)
    assert headline_metric([prefs, text], "prefs") == "win_rate.win_rate"
    assert headline_metric([prefs, text], "text") == "next_token.top1"
    root = tmp_path / "results"
    publish(root, entry)
    write_manifest(root, "lb-0123456789", entry["split"]["name"], entry["split"] | {"version": "v"})
    page = write_site(root, tmp_path / "site").read_text()
    assert "win rate vs test chosen ↑ (mean ± 95% CI)" in page and "0.5000" in page
    # no bounds on this split: its table has no gap-closed or paired-difference columns
    head = page.split('table class="sortable headline"')[1].split("</thead>")[0]
    assert "gap closed" not in head and "public_only" not in head
    forced = write_site(root, tmp_path / "forced", "next_token_like.top1").read_text()
    assert "win rate vs test chosen" not in forced


def test_an_interval_not_centred_on_its_mean_prints_both_sides():
    skewed = summary_row("p", 1.0, [0.2, 0.25, 0.3], "method", METRIC)
    skewed.entry["metrics"][METRIC].update(ci_low=0.20, ci_high=0.35)  # a bootstrap's ends
    table = build_table([skewed], "toy", METRIC)
    assert format_cell(table.cells["p", 1.0]) == "0.2500 +0.1000/-0.0500"
    assert "+above/-below where the interval is not centred" in render_text(table, BEST)
    assert table.to_json()["rows"][0]["eps=1"]["ci95"] == (0.20, 0.35)
    # sides within a tenth of the half-width: ± states it
    skewed.entry["metrics"][METRIC].update(ci_low=0.20, ci_high=0.305)
    table = build_table([skewed], "toy", METRIC)
    assert format_cell(table.cells["p", 1.0]) == "0.2500 ± 0.0525"
    assert "not centred" not in render_text(table, BEST)

"""The published store itself: every committed entry passes `leaderboard verify` — schema,
digest, ε recomputed from its ledgers, split hash, and an Ed25519 signature by a key in
results/_keys/ — so an entry edited by hand (even with its digest recomputed) cannot land."""

import json
import subprocess
from pathlib import Path

import pytest

from leaderboard.catalog import SUITES
from leaderboard.store import entry_files, manifest_hashes, read_entry, tuning_files
from leaderboard.verify import verify_tree

PUBLISHED = Path(__file__).resolve().parent.parent / "results"


def test_every_published_entry_verifies_and_is_signed():
    assert entry_files(PUBLISHED), "the published store has entries"
    assert verify_tree(PUBLISHED, manifest_hashes(PUBLISHED), allow_unsigned=False) == []


def test_every_published_entry_carries_the_canary_audit():
    """Issue 11: an entry on the leaderboard shows the one-run audit's ε lower bound next to
    its accounted ε; versions that predate the audit are withdrawn, not kept unaudited."""
    for path in entry_files(PUBLISHED):
        bound = read_entry(path)["audit"].get("canary.epsilon_lower_bound")
        assert bound is not None and bound["n"] >= 1, path
        assert all(value >= 0.0 for value in bound["values"]), path


def test_every_adopted_selection_is_a_published_tuning_reports_choice():
    """A suite's ``selected_params`` are what a signed tuning report selected on validation
    for that suite, method and ε (verify checks each report against its kept records), so
    no hand-picked value can pass as tuned; and over the suite's declared grid for that
    method, so no method is adopted from a larger search than the others had (equal
    tuning: ``fedsynth suite tune --grid`` explores, it does not publish)."""
    reports = [json.loads(p.read_text()) for p in tuning_files(PUBLISHED)]
    adopted = [
        (suite.name, method, epsilon, params)
        for suite in SUITES.values()
        for method, by_epsilon in suite.selected_params.items()
        for epsilon, params in by_epsilon.items()
    ]
    # (the bench's person-unit split has none yet: its grids are declared, not yet run)
    for suite, method, epsilon, params in adopted:
        matching = [
            r["selected"]
            for r in reports
            if (r["suite"], r["method"], r["epsilon"]) == (suite, method, epsilon)
            and r["grid"] == SUITES[suite].tuning[method]
        ]
        assert matching == [params], (suite, method, epsilon)


def test_no_result_file_lives_outside_the_signed_store():
    """Issue 35: every committed result is an entry, a kept record, a tuning report, a
    version definition or a split manifest that the signed index lists (and `leaderboard
    verify` checks); beside them only the index itself and the public keys."""
    from leaderboard.store_index import INDEX_FILE

    listed = set(json.loads((PUBLISHED / INDEX_FILE).read_text())["files"])
    for path in sorted(p for p in PUBLISHED.rglob("*") if p.is_file()):
        name = path.relative_to(PUBLISHED).as_posix()
        structure = (
            name == INDEX_FILE
            or name.startswith("_keys/")
            or path.name.startswith(".index.sqlite")  # the query cache, git-ignored
        )
        assert structure or name in listed, f"{name}: a result outside the signed store"


def _checkout_files() -> list[Path]:
    """The files a commit of this checkout would hold: tracked, or new and not ignored (run
    directories and caches are ignored, so a local run's outputs do not count)."""
    root = PUBLISHED.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout: which files are committed is unknown")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return [root / name for name in listed.split("\0") if name]


def test_no_run_record_is_committed_outside_the_store():
    """Issue 35: a run's record (a ``run_key`` with its ``evaluation``) is committed only
    as a signed entry or kept record under results/, never as a loose file elsewhere (the
    retired scripts' records were under docs/historical/)."""
    loose = []
    for path in _checkout_files():
        if path.suffix != ".json" or PUBLISHED in path.parents or not path.is_file():
            continue
        value = json.loads(path.read_text())
        if isinstance(value, dict) and {"run_key", "evaluation"} <= value.keys():
            loose.append(path.relative_to(PUBLISHED.parent).as_posix())
    assert loose == [], f"run records outside the signed store: {loose[:5]} ({len(loose)})"

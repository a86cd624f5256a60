"""The published store itself: every committed entry passes `leaderboard verify` — schema,
digest, ε recomputed from its ledgers, split hash, and an Ed25519 signature by a key in
results/_keys/ — so an entry edited by hand (even with its digest recomputed) cannot land."""

from pathlib import Path

from leaderboard.store import entry_files, manifest_hashes, read_entry
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

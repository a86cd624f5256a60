"""The published store itself: every committed entry passes `leaderboard verify` — schema,
digest, ε recomputed from its ledgers, split hash, and an Ed25519 signature by a key in
results/_keys/ — so an entry edited by hand (even with its digest recomputed) cannot land."""

from pathlib import Path

from leaderboard.store import entry_files, manifest_hashes
from leaderboard.verify import verify_tree

PUBLISHED = Path(__file__).resolve().parent.parent / "results"


def test_every_published_entry_verifies_and_is_signed():
    assert entry_files(PUBLISHED), "the published store has entries"
    assert verify_tree(PUBLISHED, manifest_hashes(PUBLISHED), allow_unsigned=False) == []

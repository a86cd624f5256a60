"""A store that notices edits, and a canary audit that blocks (issue 33, classes 9 and 10):
each adversary of ``tests/adversaries.py`` that tampers with a results store is refused by
`leaderboard verify`, and by the publish path where it would build on the tampered file."""

import json
import shutil

import adversaries
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from test_record_signing import HASHES, VERSION, record

from benchmark.cli.main import cli
from leaderboard import signing, verify
from leaderboard.entries import PublicationRefused, build_entry, canary_refutation
from leaderboard.signing import export_public_key, host_key, key_id, sign_entry
from leaderboard.store import (
    entry_files,
    manifest_hashes,
    record_files,
    write_entry,
    write_manifest,
    write_record,
)
from leaderboard.store_index import update_index
from leaderboard.suites import signed_records
from leaderboard.verify import verify_tree

CELLS = (("public_only", 0.0), ("dp_fedavg", 1.0))


def keys_of(key):
    return {key_id(key.public_key()): key.public_key()}


@pytest.fixture
def key(tmp_path):
    return host_key(tmp_path / "results")


@pytest.fixture
def store(tmp_path, key):
    """Two cells of two seeds, as ``run_suite`` publishes them: each run's record kept and
    signed, each entry built from them and signed, all of it in the signed index."""
    root = tmp_path / "results"
    manifest = write_manifest(root, VERSION, "toy", {"version": "v-test", "content_hash": "abc"})
    written = [manifest]
    for method, budget in CELLS:
        records = [record(method, budget, seed) for seed in (0, 1)]
        for r in records:
            written.append(write_record(root, VERSION, "toy", sign_entry(r, key)))
        written.append(write_entry(root, sign_entry(build_entry(records, VERSION), key)))
    update_index(root, key, keys_of(key), written)
    return root


def problems(root, **options):
    """(file name, problem) of verify as the store's owner runs it (its host key trusted)."""
    found = verify_tree(root, HASHES, **{"trust_host": True, **options})
    return [(path.name, reason) for path, reason in found]


def test_the_published_store_verifies_and_entries_bind_their_records(store):
    assert problems(store) == []
    for path in entry_files(store):
        assert len(json.loads(path.read_text())["run_digests"]) == 2


def refuted(method="dp_fedavg", bound=2.5, counts=None):
    """A run record whose canary audit refutes its ε, as a release that leaked its
    canaries scores it: ``counts`` (m, r, v) its outcome, if recorded."""
    leaked = record(method, 1.0)
    leaked["privacy"]["epsilon"] = 0.9
    leaked["privacy"]["delta"] = 1e-5
    leaked["metrics"]["canary.epsilon_lower_bound"] = bound
    for name, count in zip(("canaries", "guesses", "correct"), counts or (), strict=False):
        leaked["metrics"][f"canary.{name}"] = float(count)
    return leaked


@pytest.mark.parametrize("counts", [None, (100, 50, 50)], ids=["bound", "outcome"])
def test_a_refuted_record_or_entry_is_never_signed(key, counts):
    leaked = refuted(counts=counts)
    assert "the accounted ε 0.9" in canary_refutation(leaked)
    with pytest.raises(PublicationRefused, match="canary audit"):
        sign_entry(leaked, key)
    with pytest.raises(PublicationRefused, match="canary audit"):
        sign_entry(build_entry([leaked], VERSION), key)
    within = refuted(bound=0.9, counts=counts and (100, 50, 36))  # what ε = 0.9 gives
    assert canary_refutation(within) is None and sign_entry(within, key)["signature"]
    control = refuted(bound=9.0, counts=counts)
    control["privacy"]["epsilon"] = "inf"  # ε = ∞ claims nothing to refute
    assert canary_refutation(control) is None


def test_an_honest_audits_chance_bound_does_not_refuse_it(key):
    """A truly DP run's 95 % bound exceeds its ε in up to 5 % of runs: 65 of 100 guesses
    right at ε = 0 happens by chance (p = 0.002 before the correction for the audit's
    tests), so its 95 % bound is above 0 but the gate (level 0.01 after the correction)
    publishes it; 80 of 100 refutes ε = 0."""
    from benchmark.privacy.audit import BETA, default_guess_grid, epsilon_lower_bound

    m, level = 100, BETA / (2 * len(default_guess_grid(100)))
    lucky = refuted(bound=epsilon_lower_bound(m, 100, 65, 1e-5, level), counts=(m, 100, 65))
    lucky["privacy"]["epsilon"] = 0.0
    assert lucky["metrics"]["canary.epsilon_lower_bound"] > 0.0
    assert canary_refutation(lucky) is None and sign_entry(lucky, key)["signature"]
    lucky["metrics"]["canary.correct"] = 80.0
    assert "at p = " in canary_refutation(lucky)


def test_a_forged_signature_on_a_refuted_entry_is_refused(store, key):
    """Class 9: signed with the host's own key and listed in the index, bypassing the
    harness's refusal to sign: verify still refuses it."""
    path = adversaries.forge_refuted_entry(store, "dp_fedavg", 2.5, key)
    [(name, reason)] = problems(store)
    assert name == path.name and "canary audit's ε lower bound 2.5 exceeds" in reason
    result = CliRunner().invoke(
        cli, ["leaderboard", "verify", "--results", str(store), "--trust-host"]
    )
    assert result.exit_code != 0 and "canary audit" in result.output


def test_a_refuted_kept_record_is_refused_even_if_signed(store, key):
    path = record_files(store)[0]
    adversaries._rewrite(path, refuted(), key)
    reasons = [reason for name, reason in problems(store) if name == path.name]
    assert any(reason.startswith("run record: the canary audit") for reason in reasons)


@pytest.mark.parametrize("signer", ["own", "host"])
def test_an_edited_kept_record_never_verifies_whoever_signs_it(store, key, signer):
    """Class 10: a kept record edited and re-signed, with the submitter's key or even with
    the host's (an accepted one): the entry built from it and the index both refuse it,
    and the suite will not re-submit it (build an entry from it)."""
    own = Ed25519PrivateKey.generate()
    path = adversaries.edit_kept_record(store, "dp_fedavg", key if signer == "host" else own)
    reasons = [reason for name, reason in problems(store) if name == path.name]
    assert "edited: not the content the store's signed index lists" in reasons
    if signer == "own":
        assert any("not an accepted key" in reason for reason in reasons)
    else:
        [entry] = [p for p in entry_files(store) if "__dp_fedavg__" in p.name]
        assert "is not the one this entry was built from" in dict(problems(store))[entry.name]
    with pytest.raises(ValueError, match="signed index|not an accepted key"):
        signed_records(store, VERSION, "toy", keys_of(key))


def test_an_entry_and_its_records_re_signed_with_the_submitters_key_are_refused(store, key):
    """Class 10: the submitter's own key, its public half in the store's _keys/ (as a
    bundle brings it): not accepted by default nor by --trust-host."""
    changed = adversaries.resign_with_own_key(store, "dp_fedavg", Ed25519PrivateKey.generate())
    found = problems(store)
    for path in changed:
        assert any(n == path.name and "not an accepted key" in r for n, r in found)
    result = CliRunner().invoke(
        cli, ["leaderboard", "verify", "--results", str(store), "--trust-host"]
    )
    assert result.exit_code != 0 and "not an accepted key" in result.output


def test_a_deleted_entry_or_record_is_noticed(store):
    path = adversaries.delete_entry(store, "public_only")
    gone = record_files(store)[0]
    gone.unlink()
    deleted = "deleted: the store's signed index lists it"
    assert sorted(problems(store)) == sorted((n, deleted) for n in (path.name, gone.name))


def test_a_re_submitted_or_put_back_entry_is_noticed(store, key):
    """Class 10: a second row for a cell, signed by an accepted key but not published, and
    an entry put back after the publish path removed it (a superseded row)."""
    path = adversaries.resubmit_entry(store, "dp_fedavg", key)
    found = problems(store)
    assert {name for name, _ in found} == {path.name}
    assert (path.name, "not in the store's signed index: added after it was signed") in found
    path.unlink()

    [old] = [p for p in entry_files(store) if "__public_only__" in p.name]
    kept = old.read_bytes()
    old.unlink()
    update_index(store, key, keys_of(key), removed=[old])  # as run_suite supersedes it
    assert problems(store) == []
    old.write_bytes(kept)  # the older, validly signed copy put back
    [(name, reason)] = problems(store)
    assert name == old.name and "not in the store's signed index" in reason


def test_an_index_not_signed_by_an_accepted_key_is_refused_and_never_updated(store):
    own = Ed25519PrivateKey.generate()
    index = store / "_signed_index.json"
    listing = json.loads(index.read_text())["files"]
    adversaries._rewrite(index, {"kind": "fedsynth store index v1", "files": listing}, own)
    [(name, reason)] = problems(store)
    assert name == index.name and "not an accepted key" in reason
    key = host_key(store)
    with pytest.raises(ValueError, match="not an accepted key"):
        update_index(store, key, keys_of(key), written=[entry_files(store)[0]])


def test_only_the_named_maintainer_keys_may_sign_the_index(store, key, monkeypatch):
    """Integrity review F2: on the published store, a key the repository lists for its
    entries (an earlier host's, a submitter's accepted key) vouches for the files the index
    pins, and cannot re-sign the index over an edited store; a key ``index_signers.json``
    names can. On any other store (your ``my-results``) the keys you trust may."""
    submitter = Ed25519PrivateKey.generate()
    export_public_key(store, submitter.public_key())
    monkeypatch.setattr(signing, "REPOSITORY_STORE", store)  # the store is the published one
    (store / "_keys" / "index_signers.json").write_text(json.dumps([key_id(key.public_key())]))
    keys = {**keys_of(key), **keys_of(submitter)}
    assert verify_tree(store, HASHES) == []  # the default trust: the repository's list
    path = adversaries.delete_entry(store, "public_only")
    with pytest.raises(ValueError, match="may sign entries but not this store's index"):
        update_index(store, submitter, keys, removed=[path])  # the deletion, re-indexed
    index = store / "_signed_index.json"
    signed = index.read_bytes()
    listing = {k: v for k, v in json.loads(signed)["files"].items() if k != path.name}
    adversaries._rewrite(index, {"kind": "fedsynth store index v1", "files": listing}, submitter)
    [(found, reason)] = verify_tree(store, HASHES)
    assert found == index and "may sign entries but not this store's index" in reason
    index.write_bytes(signed)
    update_index(store, key, keys, removed=[path])  # the maintainer's publish
    assert verify_tree(store, HASHES) == []
    monkeypatch.setattr(signing, "REPOSITORY_STORE", store.parent / "elsewhere")
    update_index(store, submitter, keys)  # not the published store: the reader's keys
    assert verify_tree(store, HASHES, trusted=list(keys)) == []


def test_an_older_copy_of_the_store_is_told_stale_once_a_newer_one_was_verified(
    store, key, tmp_path, monkeypatch
):
    """A mirror that stopped before a later publish is self-consistent and signed: only
    the index's sequence, against the newest this machine verified, tells it is stale."""
    seen, mirror, clone = tmp_path / "seen.json", tmp_path / "mirror", tmp_path / "clone"
    shutil.copytree(store, mirror)
    shutil.copytree(store, clone)
    assert problems(store, seen=seen) == []  # index #1, remembered
    path = adversaries.delete_entry(store, "public_only")
    update_index(store, key, keys_of(key), removed=[path])  # a later publish: #2
    assert problems(store, seen=seen) == []
    [(name, reason)] = problems(mirror, seen=seen)
    assert name == "_signed_index.json" and "stale: sequence 1, older than" in reason
    assert problems(mirror) == []  # --allow-older: checked as before, and not remembered
    assert json.loads(seen.read_text()).popitem()[1]["sequence"] == 2
    # another index under the newest number: a fork, refused too
    update_index(mirror, key, keys_of(key))
    [(name, reason)] = problems(mirror, seen=seen)
    assert "forked: another index under sequence 2" in reason
    # the CLI remembers what it verified, and says how to check an old copy on purpose
    monkeypatch.setenv("FEDSYNTH_VERIFIED_INDEXES", str(tmp_path / "cli.json"))
    for root, options, code in ((store, [], 0), (clone, [], 1), (clone, ["--allow-older"], 0)):
        command = ["leaderboard", "verify", "--results", str(root), "--trust-host", *options]
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == code, result.output
    assert "stale: sequence 1" in CliRunner().invoke(cli, command[:-1]).output


def test_the_index_remembered_is_the_one_checked(store, key, tmp_path, monkeypatch):
    """verify reads the signed index once: an index published while the files are checked
    against the first is not the one remembered (it was read again after the check)."""
    seen, check_files = tmp_path / "seen.json", verify.check_index

    def publish_meanwhile(root, index):
        found = check_files(root, index)
        update_index(root, key, keys_of(key))  # index #2 lands before verify returns
        return found

    monkeypatch.setattr(verify, "check_index", publish_meanwhile)
    assert problems(store, seen=seen) == []
    [remembered] = json.loads(seen.read_text()).values()
    assert remembered["sequence"] == 1


def test_only_copies_of_one_store_are_compared(store, key, tmp_path):
    """Another store signed by the same key (your other results folders) is not an older
    copy of this one; nor are indexes signed before store ids and sequences existed."""
    seen, other = tmp_path / "seen.json", tmp_path / "other"
    update_index(store, key, keys_of(key))  # this store at #2
    assert problems(store, seen=seen) == []
    manifest = {"version": "v-test", "content_hash": "abc"}
    update_index(other, key, keys_of(key), [write_manifest(other, VERSION, "toy", manifest)])
    assert problems(other, seen=seen) == []  # its own #1, another store
    seen, older = tmp_path / "seen.json", tmp_path / "older"
    index = store / "_signed_index.json"
    listing = json.loads(index.read_text())["files"]
    adversaries._rewrite(index, {"kind": "fedsynth store index v1", "files": listing}, key)
    shutil.copytree(store, older)
    path = adversaries.delete_entry(store, "public_only")
    listing.pop(path.relative_to(store).as_posix())
    adversaries._rewrite(index, {"kind": "fedsynth store index v1", "files": listing}, key)
    assert problems(store, seen=seen) == []
    assert problems(older, seen=seen) == []


@pytest.mark.parametrize("value", ["zz", 7])
def test_a_signature_that_is_not_hex_is_refused_not_a_crash(store, value):
    """Integrity review F4: the index's ``bytes.fromhex`` raised out of verify, which then
    printed no problem list (an entry's schema already refuses such a value)."""
    path = store / "_signed_index.json"
    signed = json.loads(path.read_text())
    signed["signature"]["value"] = value
    path.write_text(json.dumps(signed))
    [(found, reason)] = verify_tree(store, HASHES, trust_host=True)
    assert found == path and "does not verify" in reason


def test_a_store_holding_a_withdrawn_version_does_not_verify(store, monkeypatch):
    """Integrity review F5: an older snapshot's index, signed before a version was withdrawn,
    still vouches for it; the withdrawn list does not."""
    assert verify_tree(store, HASHES, trust_host=True) == []
    monkeypatch.setitem(verify.WITHDRAWN, VERSION, "no canary audit")
    [(path, reason)] = verify_tree(store, HASHES, trust_host=True)
    assert path == store / VERSION and reason == "withdrawn: no canary audit"


def test_a_store_without_an_index_is_refused_unless_nothing_is_anchored(store):
    (store / "_signed_index.json").unlink()
    [(name, reason)] = problems(store)
    assert "no signed index" in reason
    assert problems(store, allow_unsigned=True) == []


@pytest.mark.end_to_end
def test_the_publish_path_refuses_a_run_whose_canary_audit_refutes_its_epsilon(
    tmp_path, monkeypatch
):
    """Class 9, through ``run_suite`` (how ``suite run`` and ``submit`` publish): a run whose
    canary audit refutes its ε keeps no record, gets no entry and no index line; why is in
    its run directory and in the error; an honest cell of the same grid is published. The
    leak itself belongs to the other classes (it is how a release comes to carry its
    canaries); here the trusted evaluator reports what such a release scores."""
    import dataclasses

    from benchmark.evaluation.canary_audit import CanaryAudit
    from benchmark.records import PUBLICATION_REFUSED as REFUSED
    from leaderboard.catalog import SUITES
    from leaderboard.suites import run_suite

    def audit(self, artifact, ctx):
        return {"epsilon_lower_bound": 0.4, "epsilon_ceiling": 0.5, "canaries": 1.0}

    monkeypatch.setattr(CanaryAudit, "compute", audit)
    suite = dataclasses.replace(
        SUITES["tiny"], metrics=({"name": "canary", "settings": {}},), seeds=(0,)
    )
    results = tmp_path / "results"
    roots = {"runs_root": tmp_path / "runs", "splits_root": tmp_path / "splits"}
    with pytest.raises(PublicationRefused, match="lower bound 0.4 exceeds the accounted ε 0"):
        run_suite(suite, methods=["public_only", "oracle"], results_root=results, **roots)
    [entry] = entry_files(results)  # the oracle's (ε = ∞: nothing to refute)
    assert "__oracle__" in entry.name
    assert ["__oracle__" in p.name for p in record_files(results)] == [True]
    [refused] = [p for p in roots["runs_root"].iterdir() if "__public_only__" in p.name]
    assert "exceeds the accounted ε" in json.loads((refused / REFUSED).read_text())["reason"]
    published = verify_tree(results, manifest_hashes(results), trust_host=True)
    assert published == []  # what was published verifies, the index included


def test_a_rebuild_of_the_same_split_leaves_the_kept_manifest_as_it_is(tmp_path):
    """Another host's build of the same split differs only in when it was fetched and
    built: the published manifest is not rewritten (it would leave the store dirty)."""
    manifest = {"version": "v-test", "content_hash": "abc", "built_at": "2026-01-01", "n": 1}
    path = write_manifest(tmp_path, VERSION, "toy", manifest)
    kept = path.read_text()
    write_manifest(tmp_path, VERSION, "toy", manifest | {"built_at": "2026-11-30"})
    assert path.read_text() == kept
    write_manifest(tmp_path, VERSION, "toy", manifest | {"n": 2})  # what it says changed
    assert json.loads(path.read_text())["n"] == 2

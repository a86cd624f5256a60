"""Signed entries (issue 11, item 4): `leaderboard verify` rejects an entry edited with its
integrity digest recomputed, an entry for a method that never ran, and signatures by keys
not accepted (issue 33: only the repository's key list by default; a key the store carries
counts only when named, this host's only with --trust-host); the private key stays 0600,
outside the store."""

import json
import stat

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from benchmark.cli.main import cli
from benchmark.registry import METHODS, load_plugin_file
from leaderboard import signing
from leaderboard.entries import (
    PublicationRefused,
    build_entry,
    integrity_digest,
    publication_refusal,
    version_definition,
    version_of,
)
from leaderboard.signing import (
    KEY_ENV,
    SigningKeyError,
    export_public_key,
    host_key,
    key_id,
    public_key_path,
    sign_entry,
)
from leaderboard.store import entry_files, entry_path, write_entry, write_manifest
from leaderboard.store_index import update_index
from leaderboard.verify import verify_tree

VERSION = version_of(version_definition(["abc"], [{"name": "toy"}]))
HASHES = {"v-test": "abc"}


def record(method: str, budget: float, seed: int = 0, score: float = 0.5) -> dict:
    """A run record as the runner writes it (an empty ledger: ε = 0), without running."""
    return {
        "run_key": f"toy@v-test__{method}__eps{budget:g}__user__seed{seed}__tiny__0123456789",
        "spec": {"method": {"name": method}, "seed": seed},
        "split": {"name": "toy", "version": "v-test", "content_hash": "abc"},
        "contamination": {"model": "m", "verdict": "unknown", "reason": "test"},
        "method": {"name": method, "role": "method", "config": {}},
        "privacy": {
            **{"epsilon": 0.0, "epsilon_budget": budget, "delta": 1e-5, "unit": "user"},
            **{"accountant": "rdp", "guarantee": "formal", "noise_seed": "secret", "ledger": []},
        },
        "metrics": {"toy.score": score},
        "costs": {"server_seconds": 1.0},
        "hardware": {},
        "wall_seconds": 1.0,
        "code_version": "test",
        "packages": {},
    }


@pytest.fixture
def store(tmp_path):
    """Two entries written as run_suite writes them: signed with the host (session) key."""
    root = tmp_path / "results"
    manifest = write_manifest(root, VERSION, "toy", {"version": "v-test", "content_hash": "abc"})
    key = host_key(root)
    written = [manifest]
    for method, budget in (("public_only", 0.0), ("dp_fedavg", 1.0)):
        entry = build_entry([record(method, budget, s) for s in (0, 1)], VERSION)
        written.append(write_entry(root, sign_entry(entry, key)))
    update_index(root, key, {key_id(key.public_key()): key.public_key()}, written)
    return root


def check(root, **options):
    """verify_tree as the owner of the store checks it: the host (test session) key that
    signed it trusted beside the repository's key list."""
    return verify_tree(root, HASHES, **{"trust_host": True, **options})


def host_id(root) -> str:
    return key_id(host_key(root).public_key())


def verify_cli(root, *options: str):
    command = ["leaderboard", "verify", "--results", str(root), *options]
    return CliRunner().invoke(cli, command)


def entry_of(store, method: str):
    [path] = [p for p in entry_files(store) if f"__{method}__" in p.name]
    return path, json.loads(path.read_text())


def test_signed_entries_verify_and_the_keyring_is_in_the_store(store):
    assert check(store) == []
    assert public_key_path(store, host_id(store)).exists()
    result = verify_cli(store, "--trust-host")
    assert result.exit_code == 0, result.output
    assert f"all 2 entries verified (signatures: {host_id(store)} ×2)" in result.output
    assert f"signed index #1: 3 files, as listed, signed by {host_id(store)}" in result.output


def test_an_edited_split_manifest_is_detected(store):
    """Unsigned files decide what a reader sees (a split's description, which version a
    track shows by when it started): the index lists them, so an edit is caught."""
    [manifest] = store.glob("lb-*/_manifests/*.json")
    described = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**described, "counts": {"train": {"clients": 65400}}}))
    [(path, reason)] = check(store)
    assert path == manifest and "edited" in reason


def test_by_default_only_the_repositorys_key_list_counts(store):
    """The store carries the host's public key in its own _keys/, yet without --trust-host
    (or naming the key) nothing it signed is accepted: the repository's list decides."""
    problems = dict(verify_tree(store, HASHES))
    assert len(problems) == 3  # two entries and the index
    assert all("not an accepted key" in reason for reason in problems.values())
    assert verify_cli(store).exit_code != 0
    assert verify_cli(store, "--trust", host_id(store)).exit_code == 0


def test_an_edit_with_the_digest_recomputed_is_rejected(store):
    path, entry = entry_of(store, "dp_fedavg")
    entry["metrics"]["toy.score"]["mean"] = 0.99  # a better score typed in by hand...
    entry["integrity"] = integrity_digest(entry)  # ...with the project's own digest
    path.write_text(json.dumps(entry))
    [(bad, reason), (again, edited)] = check(store)
    assert bad == again == path and "does not verify" in reason
    assert "edited: not the content the store's signed index lists" in edited
    result = verify_cli(store, "--trust-host")
    assert result.exit_code != 0 and "REJECTED" in result.output


def test_an_entry_for_a_method_that_never_ran_is_rejected(store):
    _, real = entry_of(store, "dp_fedavg")
    fake = {k: v for k, v in real.items() if k != "signature"}
    fake["method"] = {**real["method"], "name": "never_ran"}
    fake["spec"] = {**real["spec"], "privacy": {"call_seconds": 10.0}}  # on a schedule
    fake["privacy"] = {**real["privacy"], "open_on_schedule": []}  # its host closed all
    fake["entry_key"] = real["entry_key"].replace("dp_fedavg", "never_ran")
    fake["runs"] = [r.replace("dp_fedavg", "never_ran") for r in real["runs"]]
    fake["integrity"] = integrity_digest(fake)
    path = entry_path(store, fake)

    attempts = {
        "unsigned": fake,
        "does not verify": {**fake, "signature": real["signature"]},  # a borrowed signature
        "not an accepted key": sign_entry(fake, Ed25519PrivateKey.generate()),  # own key
    }
    for expected, forged in attempts.items():
        path.write_text(json.dumps(forged))
        [(bad, reason), (_, unindexed)] = check(store)
        assert bad == path and expected in reason
        assert "not in the store's signed index" in unindexed


def test_a_key_the_store_brings_counts_only_when_named_and_the_index_still_holds(store):
    """A key file added to the store's _keys/ (an unpacked bundle) is not accepted because
    it is there, nor by --trust-host; named with --trust its signature counts, but the
    signed index, by the host, still shows the entry is not the one published."""
    own = Ed25519PrivateKey.generate()
    export_public_key(store, own.public_key())
    path, entry = entry_of(store, "dp_fedavg")
    entry["metrics"]["toy.score"]["mean"] = 0.99
    entry["integrity"] = integrity_digest(entry)
    path.write_text(json.dumps(sign_entry(entry, own)))
    assert "not an accepted key" in check(store)[0][1]
    hosts = verify_cli(store, "--trust-host")
    assert hosts.exit_code != 0 and "not an accepted key" in hosts.output
    named = ["--trust", key_id(own.public_key()), "--trust", host_id(store)]
    assert "edited: not the content" in dict(check(store, trusted=named[1::2]))[path]
    assert verify_cli(store, *named).exit_code != 0


def test_a_swapped_key_file_is_rejected(store):
    own = Ed25519PrivateKey.generate()
    swapped = public_key_path(store, host_id(store))
    swapped.write_bytes(export_public_key(store.parent / "other", own.public_key()).read_bytes())
    problems = dict(check(store))
    assert f"holds key {key_id(own.public_key())}" in problems.pop(swapped)
    assert problems == {}  # the host's key comes from the host, not from the store's file


def test_an_entry_copied_under_another_name_is_rejected(store):
    path, _ = entry_of(store, "dp_fedavg")
    copy = path.with_name(path.name.replace("dp_fedavg", "dp_fedavg_again"))
    copy.write_bytes(path.read_bytes())
    problems = check(store)
    assert [bad for bad, _ in problems] == [copy, copy]
    assert "stored at the wrong place" in problems[0][1]
    assert "not in the store's signed index" in problems[1][1]


def test_allow_unsigned_accepts_unsigned_entries_and_says_so(store):
    path, entry = entry_of(store, "dp_fedavg")
    path.write_text(json.dumps({k: v for k, v in entry.items() if k != "signature"}))
    assert verify_cli(store, "--trust-host").exit_code != 0
    allowed = verify_cli(store, "--trust-host", "--allow-unsigned")
    assert allowed.exit_code == 0, allowed.output
    assert "1 unsigned entries accepted by --allow-unsigned" in allowed.output
    entry["metrics"]["toy.score"]["mean"] = 0.99  # a signed entry is still checked
    entry["integrity"] = integrity_digest(entry)
    path.write_text(json.dumps(entry))
    assert verify_cli(store, "--trust-host", "--allow-unsigned").exit_code != 0


def test_a_forged_entry_is_refused_before_its_ledger_is_read(store):
    """verify checks the signature first: an unsigned entry whose ledger no accountant can
    read is reported, not a traceback (nor hours of accounting for a long one)."""
    path, entry = entry_of(store, "dp_fedavg")
    del entry["signature"]
    entry["privacy"]["ledgers"] = [[{"bogus": 1}]]
    entry["integrity"] = integrity_digest(entry)
    path.write_text(json.dumps(entry))
    result = verify_cli(store, "--trust-host")
    assert result.exit_code != 0 and "unsigned: nothing anchors this entry" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_nothing_signs_an_entry_after_the_fact(tmp_path):
    """An unsigned entry stays unsigned: ``leaderboard sign`` (for entries from before
    signing, none of which is left) signed any that passed the other checks, a forged one
    with its digest recomputed too, so it is gone; and an index is not rebuilt over one."""
    root = tmp_path / "results"
    write_manifest(root, VERSION, "toy", {"version": "v-test", "content_hash": "abc"})
    for method, budget in (("public_only", 0.0), ("dp_fedavg", 1.0)):
        write_entry(root, build_entry([record(method, budget)], VERSION))
    sign = CliRunner().invoke(cli, ["leaderboard", "sign", "--results", str(root)])
    assert sign.exit_code != 0 and "No such command" in sign.output
    assert all("signature" not in json.loads(p.read_text()) for p in entry_files(root))
    index = CliRunner().invoke(cli, ["leaderboard", "index", "--results", str(root)])
    assert index.exit_code != 0, index.output
    assert verify_cli(root, "--trust-host").exit_code != 0


def test_the_private_key_is_created_0600_and_never_inside_the_store(store, tmp_path, monkeypatch):
    session = host_id(store)
    key_file = tmp_path / "host" / "signing-key.pem"
    monkeypatch.setenv(KEY_ENV, str(key_file))
    key = host_key(store)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert host_id(store) == key_id(key.public_key())  # created once, then reused
    stored = [p for p in store.rglob("*") if p.is_file()]
    assert all(b"PRIVATE KEY" not in p.read_bytes() for p in stored)
    published = {p.name for p in (store / "_keys").iterdir()}
    assert published == {f"{session}.pub", f"{key_id(key.public_key())}.pub"}

    key_file.chmod(0o640)
    with pytest.raises(SigningKeyError, match="readable by others"):
        host_key(store)

    inside = store / "signing-key.pem"
    monkeypatch.setenv(KEY_ENV, str(inside))
    with pytest.raises(SigningKeyError, match="inside"):
        host_key(store)
    assert not inside.exists()


def renamed(entry: dict, method: str, **privacy) -> dict:
    """``entry`` as if ``method`` had made it (unsigned), its spec's privacy with ``privacy``."""
    old = entry["method"]["name"]
    moved = {k: v for k, v in entry.items() if k != "signature"}
    moved["method"] = {**entry["method"], "name": method}
    moved["spec"] = {**entry["spec"], "privacy": privacy}
    moved["entry_key"] = entry["entry_key"].replace(old, method)
    moved["runs"] = [r.replace(old, method) for r in entry["runs"]]
    moved["integrity"] = integrity_digest(moved)
    return moved


def test_third_party_code_off_the_public_schedule_is_neither_signed_nor_verified(
    store, monkeypatch
):
    """Issue 33, timing: client code chooses how long a pool call takes, so a method that is
    not the operator's own code (unknown here, as at a maintainer's verify) is published
    only with privacy.call_seconds."""
    _, real = entry_of(store, "dp_fedavg")
    theirs = renamed(real, "their_method")
    with pytest.raises(PublicationRefused, match="their_method is third-party code"):
        sign_entry(theirs, host_key(store))
    scheduled = renamed(real, "their_method", call_seconds=30.0)
    scheduled["privacy"] = {**scheduled["privacy"], "open_on_schedule": []}
    scheduled["integrity"] = integrity_digest(scheduled)
    assert publication_refusal(scheduled) is None and sign_entry(scheduled, host_key(store))

    monkeypatch.setattr(signing, "publication_refusal", lambda document: None)  # no rule
    path = write_entry(store, sign_entry(theirs, host_key(store)))
    monkeypatch.undo()
    key = host_key(store)
    update_index(store, key, {key_id(key.public_key()): key.public_key()}, written=[path])
    [(bad, reason)] = check(store)
    assert bad == path and "ran without privacy.call_seconds" in reason


def test_third_party_code_whose_host_left_a_cache_open_is_neither_signed_nor_verified(store):
    """On the schedule, a host that could not drop or lock the kernel's caches (not root,
    too little memory) leaves timing channels open; the record says which
    (``privacy.open_on_schedule``), and third-party code is then not published."""
    _, real = entry_of(store, "dp_fedavg")
    theirs = renamed(real, "their_method", call_seconds=30.0)
    theirs["privacy"] = {**theirs["privacy"], "open_on_schedule": ["lookups"]}
    theirs["integrity"] = integrity_digest(theirs)
    with pytest.raises(PublicationRefused, match="left open on the schedule: lookups"):
        sign_entry(theirs, host_key(store))
    theirs["privacy"]["open_on_schedule"] = []
    theirs["integrity"] = integrity_digest(theirs)
    assert publication_refusal(theirs) is None
    del theirs["privacy"]["open_on_schedule"]  # a record that does not say is refused too
    assert "does not say what its host left open" in publication_refusal(theirs)
    ours = {**real, "privacy": {**real["privacy"], "open_on_schedule": ["lookups"]}}
    assert publication_refusal(ours) is None  # built-in code: the operator's own


def test_a_submitted_files_method_is_third_party_and_a_built_in_is_not(tmp_path):
    adapter = tmp_path / "probe_adapter.py"
    adapter.write_text(
        "from benchmark.registry import METHODS\n"
        "METHODS.register('schedule_probe')(type('Probe', (), {}))\n"
    )
    load_plugin_file(adapter)
    assert not METHODS.is_reviewed("schedule_probe")  # a submitted file
    assert not METHODS.is_reviewed("never_registered")  # e.g. at a maintainer's verify
    assert METHODS.is_reviewed("dp_fedavg")  # built in


def test_a_grid_of_third_party_code_off_the_schedule_is_refused_before_it_runs():
    from leaderboard.catalog import get_suite
    from leaderboard.suites import check_schedules, on_schedule

    suite = get_suite("tiny")
    with pytest.raises(PublicationRefused, match="their_method is third-party code"):
        check_schedules(suite, ["their_method"])
    check_schedules(on_schedule(suite, ["their_method"], 30.0), ["their_method"])
    check_schedules(suite)  # the suite's own methods are built in

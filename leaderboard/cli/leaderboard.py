"""``fedsynth leaderboard``: show tables, write/serve the site, verify and sign entries, and
(re)build the store's signed index."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import sys
from pathlib import Path
from typing import Any

import click

RESULTS = click.option(
    "--results",
    "results_dir",
    type=click.Path(file_okay=False),
    default="results",
    show_default=True,
    help="Root of the results store (results/<leaderboard-version>/...).",
)
MINE = click.option(
    "--mine",
    "mine_dir",
    type=click.Path(file_okay=False),
    default="my-results",
    show_default=True,
    help="Your own runs' store (quickstart/submit write there); shown beside --results, "
    "marked '(yours)', when it exists.",
)
VERSION = click.option(
    "--version", "version", default=None, help="Leaderboard version (default: newest)."
)


class _EntryErrorsAsMessages(click.Group):
    """A store's unreadable entry (yours, or a downloaded one) is reported as its file and
    what is wrong with it, not as a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from leaderboard.schema import EntryError

        try:
            return super().invoke(ctx)
        except EntryError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group("leaderboard", cls=_EntryErrorsAsMessages)
def leaderboard_group() -> None:
    """Browse, verify and publish the versioned leaderboard (results/ is the source of truth)."""


@leaderboard_group.command("show")
@RESULTS
@MINE
@VERSION
@click.option("--dataset", default=None, help="Only this split name.")
@click.option(
    "--metric",
    default=None,
    help="Metric to tabulate (default: each split's headline: next-token top-1, or the win "
    "rate on a preference split).",
)
@click.option(
    "--epsilon", type=float, default=None, help="Only this ε budget (bounds always shown)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the tables as JSON.")
def show(
    results_dir: str,
    mine_dir: str,
    version: str | None,
    dataset: str | None,
    metric: str | None,
    epsilon: float | None,
    as_json: bool,
) -> None:
    """Print methods × ε tables like the papers': mean ± 95% CI (over test clients and
    seeds where entries kept per-client hits, else over seeds), gap closed, the
    best ranked method per column in bold (bounds and controls are marked, not ranked).
    With no --version and no --dataset: every track's headline table, each under a line
    saying what it measures, its split and its privacy unit."""
    from leaderboard.store import query_with
    from leaderboard.tables import BEST, BOLD, build_table, headline_metrics, render_text

    bold = BOLD if sys.stdout.isatty() else BEST
    if version is None and dataset is None and not as_json:
        from leaderboard.tracks import grouped_rows, render_tracks, track_views

        root = Path(results_dir)
        views = track_views(root, grouped_rows(root, {"yours": Path(mine_dir)}))
        if any(v.version for v in views):  # else a store of other suites: its newest version
            click.echo(render_tracks(views, metric, epsilon, bold))
            return
    rows = query_with(
        Path(results_dir),
        {"yours": Path(mine_dir)},
        version=version,
        split=dataset,
        epsilon_budget=epsilon,
    )
    if not rows:
        raise click.ClickException(f"no leaderboard entries under {results_dir}")
    tables = [
        build_table(rows, split, shown)
        for split in sorted({r.split for r in rows})
        for shown in ([metric] if metric else headline_metrics(rows, split))
    ]
    tables = [t for t in tables if t.methods]
    if not tables:
        raise click.ClickException(f"no entry has metric {metric or 'a headline metric'!r}")
    if as_json:
        click.echo(json.dumps([t.to_json() for t in tables], indent=1))
        return
    click.echo(f"leaderboard {rows[0].leaderboard_version}")
    for table in tables:
        click.echo(render_text(table, bold))


@leaderboard_group.command("site")
@RESULTS
@MINE
@VERSION
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
@click.option(
    "--metric",
    default=None,
    help="Metric of the tables and plots (default: each split's headline).",
)
def site(
    results_dir: str, mine_dir: str, version: str | None, out_dir: str, metric: str | None
) -> None:
    """Write the static site: per split the headline table, the ε plot and the audits, rows
    linked to their entries, your own runs marked '(yours)'; one page per leaderboard
    version, the index showing --version (default: the newest)."""
    from leaderboard.site import write_site
    from leaderboard.store import versions

    others = {"yours": Path(mine_dir)}
    index = write_site(Path(results_dir), Path(out_dir), metric, shown=version, others=others)
    click.echo(f"wrote {index} ({len(versions(Path(results_dir)))} versions)")


@leaderboard_group.command("serve")
@click.option(
    "--dir",
    "site_dir",
    type=click.Path(exists=True, file_okay=False),
    default="site",
    show_default=True,
    help="A directory written by `leaderboard site`.",
)
@click.option("--port", type=int, default=8000, show_default=True)
def serve(site_dir: str, port: int) -> None:
    """Serve the site on http://127.0.0.1:PORT until interrupted."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=site_dir)
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        click.echo(f"serving {site_dir} on http://127.0.0.1:{port}/ (Ctrl-C to stop)")
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()


@leaderboard_group.command("verify")
@RESULTS
@click.option(
    "--allow-unsigned",
    is_flag=True,
    help="Accept entries without a signature, and a store without a signed index (their "
    "content is then anchored to nothing).",
)
@click.option(
    "--trust",
    "trusted",
    multiple=True,
    metavar="KEY_ID",
    help="Accept only signatures by this key (repeatable), from the repository's key list "
    "or the store's own _keys/: naming a key is how to accept one the repository does not "
    "list (default: every key in the repository's results/_keys/).",
)
@click.option(
    "--trust-host",
    is_flag=True,
    help="Also accept this host's own key ($FEDSYNTH_SIGNING_KEY, else "
    "~/.config/fedsynth/signing-key.pem): for your own runs, e.g. in my-results.",
)
@click.option(
    "--allow-older",
    is_flag=True,
    help="Check a copy whose signed index is older than one this machine verified before "
    "(an old clone, on purpose), without refusing it for that or remembering it.",
)
def verify(
    results_dir: str,
    allow_unsigned: bool,
    trusted: tuple[str, ...],
    trust_host: bool,
    allow_older: bool,
) -> None:
    """Check every entry: schema, integrity digest, place, ε recomputed from its ledgers,
    canary audit within ε, split hash, a signature by an accepted key, its kept records;
    and the store's signed index (nothing deleted, added or edited since it was signed, and
    not older than one this machine verified before); see docs/architecture.md, "Record
    integrity"."""
    from collections import Counter

    from leaderboard.index_freshness import seen_path
    from leaderboard.signing import SigningKeyError
    from leaderboard.store import entry_files, manifest_hashes, read_entry
    from leaderboard.store_index import INDEX_FILE
    from leaderboard.verify import verify_tree

    root = Path(results_dir)
    try:
        problems = verify_tree(
            root,
            manifest_hashes(root),
            allow_unsigned=allow_unsigned,
            trusted=trusted or None,
            trust_host=trust_host,
            seen=None if allow_older else seen_path(),
        )
    except SigningKeyError as exc:
        raise click.ClickException(str(exc)) from exc
    for path, problem in problems:
        click.echo(f"REJECTED {path}: {problem}", err=True)
    total = len(entry_files(root))
    if problems:
        raise click.ClickException(f"{len(problems)} problems in {root} ({total} entries)")
    signers = Counter(
        read_entry(p).get("signature", {}).get("key_id", "UNSIGNED") for p in entry_files(root)
    )
    by = ", ".join(f"{kid} ×{n}" for kid, n in sorted(signers.items()))
    click.echo(f"all {total} entries verified" + (f" (signatures: {by})" if total else ""))
    index = root / INDEX_FILE
    if index.exists():
        signed = json.loads(index.read_text())
        listed, kid = len(signed["files"]), signed["signature"]["key_id"]
        number = signed.get("sequence", 0)
        click.echo(f"signed index #{number}: {listed} files, as listed, signed by {kid}")
    if signers["UNSIGNED"]:
        click.echo(f"{signers['UNSIGNED']} unsigned entries accepted by --allow-unsigned", err=True)


def _host_key(root: Path) -> Any:
    """This host's signing key for ``root`` (exported into its _keys/), or a CLI error."""
    from leaderboard.signing import SigningKeyError, host_key

    try:
        return host_key(root)
    except SigningKeyError as exc:
        raise click.ClickException(str(exc)) from exc


@leaderboard_group.command("index")
@RESULTS
def index(results_dir: str) -> None:
    """(Re)build the store's signed index with this host's key ($FEDSYNTH_SIGNING_KEY,
    else ~/.config/fedsynth/signing-key.pem) and export its public key into _keys/: every
    entry, kept record, tuning report, version definition and split manifest with the
    digest of its content, so that verify notices one deleted, added back or edited. Runs
    publish into the index themselves; this is for a store without one, or to vouch for a
    deliberate change (it lists what changed). Refused unless the store passes every other
    check, with this host's key trusted beside the repository's."""
    from leaderboard.signing import key_id
    from leaderboard.store import manifest_hashes
    from leaderboard.verify import index_store

    root = Path(results_dir)
    key = _host_key(root)
    changes, problems = index_store(root, key, manifest_hashes(root))
    for path, problem in problems:
        click.echo(f"REJECTED {path}: {problem}", err=True)
    if problems:
        raise click.ClickException(f"{len(problems)} problems; the index was not written")
    for change, names in changes.items():
        for name in names:
            click.echo(f"{change}: {name}")
    counts = ", ".join(f"{len(names)} {change}" for change, names in changes.items())
    click.echo(f"signed index written by {key_id(key.public_key())} ({counts})")

"""``fedsynth splits``: build, list, show, verify and check federated splits."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from benchmark.data import PARTS
from benchmark.registry import RegistryError
from datasets_builders.http import FetchError
from datasets_builders.hub import HubError

DEFAULT_ROOT = Path("data") / "splits"


def _friendly(command: Callable[..., None]) -> Callable[..., None]:
    """Turn expected failures (bad options, missing files, broken sources) into messages."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except (RegistryError, OSError, ValueError, KeyError, FetchError, HubError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise click.ClickException(f"{type(exc).__name__}: {message}") from exc

    return run


def _key_values(pairs: Iterable[str], what: str) -> dict[str, Any]:
    """KEY=VALUE pairs; a VALUE that parses as JSON (numbers, true, lists) is typed."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=what)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _overrides(given: dict[str, Any]) -> dict[str, Any]:
    """Options the user actually set; 0 means 'none' for the optional integer limits."""
    out = {k: v for k, v in given.items() if v is not None and v != ()}
    for name in ("span_length", "cap", "public_max", "max_records"):
        if out.get(name) == 0:
            out[name] = None
    if "licences" in out:
        out["licences"] = tuple(out["licences"])
    return out


@click.group("splits")
def splits_group() -> None:
    """Build and inspect versioned, date-filtered federated splits."""


@splits_group.command("build")
@click.argument("source")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Split directory.")
@click.option("--seed", type=int, help="Seed of every random choice (default 0).")
@click.option("--date-start", help="First date kept, YYYY-MM-DD (inclusive).")
@click.option("--date-end", help="Last date kept, YYYY-MM-DD (inclusive).")
@click.option("--licence", "licences", multiple=True, help="Keep only this licence (repeatable).")
@click.option("--min-chars", type=int, help="Drop documents shorter than this after cleaning.")
@click.option("--dedupe", type=click.Choice(["text", "record", "none"]), help="Dedupe rule.")
@click.option(
    "--partition",
    help="Client rule: natural, document, iid, dirichlet or label_subset (recipe default).",
)
@click.option(
    "-P",
    "--partition-param",
    "partition_params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Partition parameter, e.g. -P num_clients=100 -P alpha=0.5 (repeatable).",
)
@click.option("--label-key", help="Extra field to partition by instead of the label.")
@click.option("--strong-fraction", type=float, help="Fraction of training clients flagged strong.")
@click.option("--span-length", type=int, help="Tokens per sample; 0 keeps whole documents.")
@click.option("--min-span-tokens", type=int, help="Drop spans shorter than this.")
@click.option("--tokenizer", help="'gpt2' (whisper's bundled GPT-2 BPE) or hf:LOCAL_DIR.")
@click.option("--cap", type=int, help="Max samples per client (0: no cap).")
@click.option("--validation-clients", type=float, help="Held-out clients: fraction < 1 or count.")
@click.option("--test-clients", type=float, help="Test clients: fraction < 1 or count.")
@click.option(
    "--public",
    help="none | clients:X | label:A,B | before_window | before_window:person_disjoint.",
)
@click.option("--public-max", type=int, help="Max public samples (0: all).")
@click.option("--max-records", type=int, help="Read only the first N source records (0: all).")
@click.option(
    "-o",
    "--option",
    "source_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Source option (repeatable).",
)
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Fetch cache directory.")
@click.option("--overwrite", is_flag=True, help="Replace a finished split at --out.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@_friendly
def build(
    source: str,
    out: str,
    partition_params: tuple[str, ...],
    source_options: tuple[str, ...],
    cache_dir: str | None,
    overwrite: bool,
    quiet: bool,
    **options: Any,
) -> None:
    """Build a split of SOURCE (see `fedsynth datasets list`) into --out."""
    from benchmark.registry import DATASETS
    from datasets_builders.pipeline import build_split, options_for

    given = _overrides(options)
    if partition_params:
        given["partition_params"] = _key_values(partition_params, "--partition-param")
    if source_options:
        given["source_options"] = _key_values(source_options, "--option")
    instance = DATASETS.get(source)()
    manifest = build_split(
        instance,
        options_for(instance, given),
        out,
        cache_dir=cache_dir,
        overwrite=overwrite,
        progress=not quiet,
    )
    counts = manifest["counts"]
    summary = ", ".join(
        f"{p} {counts[p]['clients']} clients/{counts[p]['samples']} samples" for p in PARTS
    )
    click.echo(f"built {manifest['name']} in {out}: {summary}")
    if manifest["demo"]:
        click.echo("note: demo corpus, seen by public models; not for privacy-utility claims")


@splits_group.command("list")
@click.option(
    "--root", type=click.Path(file_okay=False), default=str(DEFAULT_ROOT), show_default=True
)
@_friendly
def list_splits(root: str) -> None:
    """List the finished splits under --root."""
    from benchmark.split_storage import find_splits, read_manifest

    found = list(find_splits(root))
    if not found:
        click.echo(f"no finished splits under {root}")
    for path in found:
        try:
            manifest = read_manifest(path)
        except ValueError as exc:  # a corrupt manifest should not hide the other splits
            click.echo(f"{path}  unreadable manifest: {exc}")
            continue
        train = manifest["counts"]["train"]
        demo = "  [demo]" if manifest.get("demo") else ""
        click.echo(
            f"{path}  {manifest['name']}  train {train['clients']} clients/"
            f"{train['samples']} samples{demo}"
        )


def _describe(manifest: dict[str, Any]) -> list[str]:
    source, build_opts = manifest["source"], manifest["build"]
    window = manifest["filters"]["date_window"]
    chunking = manifest["chunking"]
    lines = [
        f"name:       {manifest['name']}",
        f"hash:       {manifest['content_hash']}",
        f"source:     {source['name']} ({source['revision']}) options={source['options']}",
        f"demo:       {manifest['demo']}",
        f"window:     {window['start']} .. {window['end']} on {window['field']} (inclusive)",
        f"partition:  {manifest['partition']['rule']} {manifest['partition']['params']}"
        f" strong={manifest['partition']['strong_clients']}",
        f"samples:    {chunking['span_length'] or 'whole documents'} tokens"
        f" ({chunking['tokenizer']}), cap {manifest['cap']['max_samples_per_client']}/client",
        f"public:     {manifest['public']['rule']} (max {manifest['public']['max']})",
        f"seed:       {build_opts['seed']}",
        f"licences:   {manifest['licences']}",
        f"dropped:    {manifest['filters']['dropped']}",
        f"fetched at: {manifest['fetched_at']}",
    ]
    for part in PARTS:
        counts = manifest["counts"][part]
        spread = counts.get("samples_per_client", {})
        lines.append(
            f"{part + ':':<11} {counts['clients']} clients, {counts['samples']} samples"
            + (f", per client {spread}" if spread else "")
        )
    return lines


@splits_group.command("show")
@click.argument("path", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the whole manifest as JSON.")
@_friendly
def show(path: str, as_json: bool) -> None:
    """Print the manifest of the split at PATH."""
    from benchmark.split_storage import read_manifest

    manifest = read_manifest(path)
    if as_json:
        click.echo(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        click.echo("\n".join(_describe(manifest)))


@splits_group.command("verify")
@click.argument("path", type=click.Path(file_okay=False))
@_friendly
def verify_command(path: str) -> None:
    """Recompute the content hash of the split at PATH; fail on any mismatch."""
    from benchmark.split_storage import verify

    result = verify(path)
    if not result.ok:
        raise click.ClickException(
            f"{path} does not match its manifest:\n  " + "\n  ".join(result.problems)
        )
    click.echo(f"ok: {path} matches {result.expected_hash}")


@splits_group.command("check")
@click.argument("path", type=click.Path(file_okay=False))
@click.option(
    "--model", required=True, help="Model name, e.g. llama-3-8b or smollm2-135m-instruct."
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@_friendly
def check_command(path: str, model: str, as_json: bool) -> None:
    """Could MODEL have seen the private data of the split at PATH?"""
    from benchmark.model_cutoffs import check, lookup
    from benchmark.split_storage import read_manifest

    lookup(model)  # a misspelt name is refused, even where a demo corpus makes it moot
    verdict = check(read_manifest(path), model)
    if as_json:
        click.echo(json.dumps(verdict.as_dict()))
    else:
        click.echo(f"{verdict.status}: {verdict.reason}")

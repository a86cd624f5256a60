"""``fedsynth quickstart``, ``fedsynth suite run`` and ``fedsynth submit``: run a named suite."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path
from typing import Any

import click

from benchmark.privacy.errors import PrivacyError
from benchmark.profiles import PROFILES
from benchmark.registry import RegistryError, UnsafePathError, check_under
from benchmark.spec import SpecError

STORE_OPTIONS = [
    click.option(
        "--results",
        default="my-results",
        show_default=True,
        help="Where your runs' entries go (git-ignored). Maintainers regenerate the published "
        "entries with --results results.",
    ),
    click.option(
        "--published",
        default="results",
        show_default=True,
        help="The published store, shown beside yours (read only).",
    ),
    click.option("--runs", default="runs", show_default=True, help="Run state root (resumable)."),
    click.option("--splits", default="data/splits", show_default=True, help="Split build root."),
]


def store_options(command):
    for option in reversed(STORE_OPTIONS):
        command = option(command)
    return command


def run_with_progress(
    suite_name: str,
    methods: list[str] | None,
    results: str,
    runs: str,
    splits: str,
    plugin: Path | None = None,
    finished_only: bool = False,
    executor: Any = None,
    client_actors: int = 0,
    profile: str | None = None,
    call_seconds: float | None = None,
) -> list[dict[str, Any]]:
    """Run a suite (on ``profile`` in place of its own, if given; with ``methods``' pool
    calls on the public schedule ``call_seconds``, if given) with a progress bar over its
    runs; errors become clean CLI messages."""
    from tqdm import tqdm

    from benchmark.isolation.coordinator import MethodError
    from leaderboard.catalog import get_suite
    from leaderboard.suites import on_schedule, run_suite, with_profile

    suite = with_profile(get_suite(suite_name), profile)
    if call_seconds is not None:
        suite = on_schedule(suite, methods or [], call_seconds)
    total = len(suite.grid(methods))
    with tqdm(total=total, desc=f"suite {suite_name}", unit="run") as bar:

        def advance(label: str) -> None:
            bar.set_postfix_str(f"done: {label}")
            bar.update(1)

        try:
            return run_suite(
                suite,
                methods=methods,
                results_root=Path(results),
                runs_root=Path(runs),
                splits_root=Path(splits),
                on_run=advance,
                plugin=plugin,
                finished_only=finished_only,
                executor=executor,
                client_actors=client_actors,
            )
        except (SpecError, RegistryError, PrivacyError, ValueError, MethodError) as exc:
            raise click.ClickException(str(exc)) from exc


@click.command("quickstart")
@store_options
@click.option("--suite", "suite_name", default="quick", show_default=True, help="Suite to run.")
@click.option(
    "--site", "site_dir", default="site", show_default=True, help="Where to write the site."
)
def quickstart(
    results: str, published: str, runs: str, splits: str, suite_name: str, site_dir: str
) -> None:
    """The main job: build the suite's split, run every published method of the suite
    (cpu profile: ε=1 plus the bounds and the oracle control), evaluate, write your entries
    under my-results/ (the published results/ are left as they are), print the table with
    your rows, marked "(yours)", beside the published ones of the same leaderboard version
    and write the static site."""
    from leaderboard.catalog import get_suite
    from leaderboard.site import write_site
    from leaderboard.store import query_with
    from leaderboard.tables import BEST, build_table, headline_metrics, render_text

    suite = get_suite(suite_name)
    expected = f"; {suite.expected_duration}" if suite.expected_duration else ""
    click.echo(f"quickstart: the {suite.name} suite, {len(suite.grid())} runs{expected}")
    began = time.perf_counter()
    entries = run_with_progress(suite_name, None, results, runs, splits)
    version = entries[0]["leaderboard_version"]
    yours = {"yours": Path(results)}
    rows = query_with(Path(published), yours, version=version)
    for split in sorted({r.split for r in rows}):
        for metric in headline_metrics(rows, split):
            click.echo(render_text(build_table(rows, split, metric), BEST))
    index = write_site(Path(published), Path(site_dir), shown=version, others=yours)
    click.echo(f"site: {index}")
    click.echo(f"quickstart finished in {time.perf_counter() - began:.0f} s")


@click.group("suite")
def suite_group() -> None:
    """Run a named suite (or some of its methods) into a results store."""


@suite_group.command("run")
@click.argument("suite_name")
@store_options
@click.option(
    "--methods",
    default=None,
    help="Comma-separated subset of the suite's methods (default: all), e.g. to run the "
    "cheap rows first; runs already finished under --runs are reused, not repeated.",
)
@click.option(
    "--finished-only",
    is_flag=True,
    help="Run nothing: write entries from the runs already finished under --runs (e.g. "
    "while other processes work through the grid).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: one run after another here; ray: each run a Ray task (the cluster extra), "
    "on the cluster at --address or on a local head.",
)
@click.option("--address", default=None, help="Ray cluster address (with --executor ray).")
@click.option(
    "--client-actors",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Spread each run's clients over this many Ray actors (one CPU each; each holds "
    "its range of clients in a sandboxed client worker). 0: one local client worker.",
)
@click.option(
    "--profile",
    type=click.Choice(sorted(PROFILES)),
    default=None,
    help="Run the grid on this model profile in place of the suite's (e.g. paper on a GPU).",
)
@click.option(
    "--plan",
    is_flag=True,
    help="Run nothing: print the runs, the models each loads (and whether they are cached) "
    "and the hours the known rates give.",
)
def suite_run(
    suite_name: str,
    results: str,
    published: str,
    runs: str,
    splits: str,
    methods: str | None,
    finished_only: bool,
    executor: str,
    address: str | None,
    client_actors: int,
    profile: str | None,
    plan: bool,
) -> None:
    """Run SUITE_NAME's grid with a progress bar and write one entry per (method, ε)."""
    from leaderboard.executors import make_executor

    chosen = [m.strip() for m in methods.split(",") if m.strip()] if methods else None
    if plan:
        from leaderboard.catalog import get_suite
        from leaderboard.suite_plan import plan_lines
        from leaderboard.suites import with_profile

        try:
            suite = with_profile(get_suite(suite_name), profile)
            click.echo("\n".join(plan_lines(suite, chosen, Path(splits))))
        except (SpecError, RegistryError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
        return
    try:
        runner = make_executor(executor, address)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    began = time.perf_counter()
    entries = run_with_progress(
        suite_name,
        chosen,
        results,
        runs,
        splits,
        finished_only=finished_only,
        executor=runner,
        client_actors=client_actors,
        profile=profile,
    )
    click.echo(
        f"suite {suite_name}: {len(entries)} entries in {results} "
        f"({time.perf_counter() - began:.0f} s)"
    )


def parse_grid(options: tuple[str, ...]) -> dict[str, list[Any]]:
    """``name=v1,v2,...`` options as a grid; each value is read as JSON (numbers, null,
    booleans), else kept as a string."""
    grid: dict[str, list[Any]] = {}
    for option in options:
        name, sep, values = option.partition("=")
        if not sep or not name.strip() or not values.strip():
            raise click.BadParameter(f"{option!r}: expected name=v1,v2,...", param_hint="--grid")
        if name.strip() in grid:
            raise click.BadParameter(f"{name.strip()} given twice", param_hint="--grid")
        grid[name.strip()] = [_json_or_text(v.strip()) for v in values.split(",")]
    return grid


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


@suite_group.command("tune")
@click.argument("suite_name")
@store_options
@click.option("--method", required=True, help="The suite's method to tune.")
@click.option(
    "--grid",
    "grid_options",
    multiple=True,
    help="name=v1,v2,...: one parameter's candidates (repeat for a product grid), e.g. "
    "--grid client_lr=0.001,0.01,0.1 --grid clip_norm=0.01,0.1,1.0 (paper 000's grid); "
    "default: the suite's declared grid for METHOD.",
)
@click.option("--epsilon", type=float, default=None, help="Budget (default: the suite's first).")
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed (default: the budget's first; one outside the suite's keeps the tuning's "
    "noise draws apart from the reported runs').",
)
@click.option(
    "--select",
    default="next_token.validation_top1",
    show_default=True,
    help="The validation metric that selects (a test metric is refused).",
)
def suite_tune(
    suite_name: str,
    results: str,
    published: str,
    runs: str,
    splits: str,
    method: str,
    grid_options: tuple[str, ...],
    epsilon: float | None,
    seed: int | None,
    select: str,
) -> None:
    """Select METHOD's parameters on validation over a grid at one budget of SUITE_NAME;
    writes a signed report beside the runs' kept records (leaderboard/tuning.py)."""
    from benchmark.isolation.coordinator import MethodError
    from leaderboard.catalog import get_suite
    from leaderboard.tuning import tune

    suite = get_suite(suite_name)
    grid = parse_grid(grid_options) if grid_options else suite.tuning.get(method)
    if not grid:
        raise click.UsageError(f"suite {suite_name} declares no grid for {method!r}: give --grid")
    try:
        report, path = tune(
            suite, method, grid, results_root=Path(results),
            runs_root=Path(runs), splits_root=Path(splits), epsilon=epsilon, seed=seed,
            select=select, on_run=lambda label: click.echo(f"finished: {label}"),
        )  # fmt: skip
    except (SpecError, RegistryError, PrivacyError, ValueError, MethodError) as exc:
        raise click.ClickException(str(exc)) from exc
    for candidate in report["candidates"]:
        chosen = " *" if candidate["params"] == report["selected"] else ""
        click.echo(f"{candidate['params']}  {select} = {candidate['value']:.4f}{chosen}")
    click.echo(f"selected {report['selected']} (report: {path})")


@click.command("submit")
@click.argument("adapter", type=click.Path(exists=True, dir_okay=False))
@store_options
@click.option("--suite", "suite_name", default="quick", show_default=True, help="Suite to run.")
@click.option("--bundle", default=None, help="Path of the submission bundle (.tar.gz).")
@click.option(
    "--call-seconds",
    type=click.FloatRange(min=1e-3, max=86_400.0),
    required=True,
    help="The public schedule of your method's pool calls: each is answered exactly this "
    "many seconds after it is made, your method process stopped meanwhile, so your client "
    "code cannot signal through its running time. Above your slowest call on this machine "
    "(the first also starts the client side); a call past it stops the run.",
)
def submit(
    adapter: str,
    results: str,
    published: str,
    runs: str,
    splits: str,
    suite_name: str,
    bundle: str | None,
    call_seconds: float,
) -> None:
    """Run a third-party method adapter (a Python file that registers one method) through
    a suite with the same splits, budgets, seeds and evaluation as the published entries,
    on a public schedule of pool calls (--call-seconds), write its entries, and pack them
    with their specs and split manifests into a bundle."""
    from benchmark.isolation.coordinator import MethodError, plugin_methods

    try:  # the file is imported only in sandboxed method processes, never here
        added = plugin_methods(Path(adapter))
    except (RegistryError, MethodError) as exc:
        raise click.ClickException(str(exc)) from exc
    if len(added) != 1:
        raise click.ClickException(f"{adapter} must register exactly one new method, got {added}")
    entries = run_with_progress(
        suite_name, added, results, runs, splits, Path(adapter), call_seconds=call_seconds
    )
    out = Path(bundle or f"submission-{added[0]}.tar.gz")
    write_bundle(out, Path(results), entries)
    click.echo(f"method {added[0]}: {len(entries)} entries; bundle {out}")


def write_bundle(out: Path, results_root: Path, entries: list[dict[str, Any]]) -> None:
    """Entries (which embed their resolved specs) plus the split manifests they cite and the
    public key that signed them (the submitter's own: maintainers decide whether to accept
    it into the published keyring)."""
    from leaderboard.signing import public_key_path
    from leaderboard.store import MANIFESTS_DIR, entry_path

    with tarfile.open(out, "w:gz") as tar:
        for entry in entries:
            path = entry_path(results_root, entry)  # refuses names that leave the store
            _pack(tar, results_root, path)
            manifests = results_root / entry["leaderboard_version"] / MANIFESTS_DIR
            for manifest in manifests.glob(f"{entry['split']['name']}@*.json"):
                _pack(tar, results_root, manifest)
        for kid in sorted({entry["signature"]["key_id"] for entry in entries}):
            _pack(tar, results_root, public_key_path(results_root, kid))


def _pack(tar: tarfile.TarFile, root: Path, path: Path) -> None:
    """Add one regular file under ``root`` to the bundle: a name or a symlink planted in
    the store must not pack files from elsewhere on the host into it."""
    check_under(root, path, where="bundle file")
    if not path.is_file():
        raise UnsafePathError(f"bundle file: {path} is not a regular file")
    tar.add(path, arcname=str(path.relative_to(root)), recursive=False)

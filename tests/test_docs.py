"""The README and docs/ cannot rot silently: every relative link resolves (file and heading),
and every `fedsynth` command shown in a code block names a real command, real options, a
real suite, source and leaderboard version. The tutorial's example adapter is run end to
end by tests/test_submit.py."""

import re
import shlex
from pathlib import Path

import click
import pytest

from benchmark.cli.main import cli
from benchmark.registry import DATASETS
from leaderboard.catalog import SUITES

ROOT = Path(__file__).parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
COMMAND_BLOCKS = {"", "bash", "sh", "console"}
SHELL_LINE = re.compile(r"\s*(?:[A-Z_]+=\S*\s+)*fedsynth\s")  # optional VAR=value prefixes


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8")))


def test_slug_follows_github():
    assert slug('2. Who is a "user"? The privacy unit') == "2-who-is-a-user-the-privacy-unit"
    assert slug("The benchmark suite (previous split)") == "the-benchmark-suite-previous-split"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    checked = 0
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target} does not exist"
        assert resolved.is_relative_to(ROOT), f"{page.name}: {target} leaves the repository"
        if anchor:
            assert resolved.suffix == ".md", f"{page.name}: {target}: anchor into a non-page"
            assert anchor in anchors(resolved), f"{page.name}: {target}: no such heading"
        checked += 1
    assert checked or page.name == "architecture.md", f"{page.name} links nowhere"


def shown_commands() -> list[tuple[str, list[str]]]:
    """(page, argv after `fedsynth`) for every command line in a shell code block."""
    found = []
    for page in PAGES:
        for language, block in FENCE.findall(page.read_text(encoding="utf-8")):
            if language not in COMMAND_BLOCKS:
                continue
            for line in block.replace("\\\n", " ").splitlines():
                for part in line.split("&&"):
                    if SHELL_LINE.match(part):
                        words = shlex.split(part, comments=True)
                        found.append((page.name, words[words.index("fedsynth") + 1 :]))
    return found


COMMANDS = shown_commands()


def resolve(argv: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The command `argv` names, the path to it, and its remaining arguments."""
    command: click.Command = cli
    path: list[str] = []
    args = list(argv)
    while isinstance(command, click.Group):
        while args and args[0] == "--plugin":  # the group's own option
            del args[:2]
        assert args, f"`fedsynth {' '.join(argv)}` stops at a group"
        name = args.pop(0)
        sub = command.get_command(click.Context(command), name)
        assert sub is not None, f"`fedsynth {' '.join(argv)}`: no command {name!r}"
        command, path = sub, [*path, name]
    return command, path, args


def option_values(command: click.Command, args: list[str]) -> tuple[set[str], dict, list]:
    """(option names used, option -> values, positional words), options checked as known."""
    known = {"-h", "--help"}
    takes_value = set()
    for param in command.params:
        if isinstance(param, click.Option):
            known |= {*param.opts, *param.secondary_opts}
            if not param.is_flag:
                takes_value |= set(param.opts)
    used, values, positional = set(), {}, []
    words = iter(args)
    for word in words:
        if word.startswith("-"):
            name, has_value, value = word.partition("=")
            assert name in known, f"{command.name}: unknown option {name}"
            used.add(name)
            if name in takes_value and not has_value:
                value = next(words)
            values.setdefault(name, []).append(value)
        else:
            positional.append(word)
    return used, values, positional


def test_the_docs_show_commands():
    pages = {page for page, _ in COMMANDS}
    assert {"reference.md", "build-a-split.md", "run-a-suite.md", "write-an-adapter.md"} <= pages
    assert len(COMMANDS) >= 40


@pytest.mark.parametrize(("page", "argv"), COMMANDS, ids=lambda x: " ".join(x)[:60])
def test_every_shown_command_exists_with_its_options(page, argv):
    command, path, args = resolve(argv)
    used, values, positional = option_values(command, args)
    for option in command.params:  # a shown command runs as shown
        if option.required and isinstance(option, click.Option):
            assert set(option.opts) & used, f"{page}: {' '.join(argv)} lacks {option.opts[0]}"
    if path[:1] == ["suite"] or path in (["submit"], ["quickstart"]):
        suites = positional[:1] if path[:1] == ["suite"] else values.get("--suite", [])
        for name in suites:
            assert name in SUITES, f"{page}: no suite {name!r}"
        methods = [*values.get("--method", []), *values.get("--methods", [""])[0].split(",")]
        for method in filter(None, methods):
            assert method in SUITES[suites[0]].methods, f"{page}: {method} not in {suites[0]}"
    if path == ["splits", "build"]:
        assert positional[0] in DATASETS.names(), f"{page}: no source {positional[0]!r}"
        declared = {o.name for o in getattr(DATASETS.get(positional[0]), "options", None) or ()}
        for option in [*values.get("--option", []), *values.get("-o", [])]:
            key = option.partition("=")[0]
            assert key in declared, f"{page}: {positional[0]} has no option {key!r}"
    for version in values.get("--version", []):
        assert (ROOT / "results" / version).is_dir(), f"{page}: no leaderboard {version}"

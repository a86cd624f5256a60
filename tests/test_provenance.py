"""What a record says about the code that made it (``benchmark.provenance``)."""

import subprocess
from pathlib import Path

from benchmark.provenance import code_version, cpu_model, hardware


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_a_checkout_is_dirty_for_its_code_not_for_the_results_store_runs_add_to(tmp_path):
    """Long runs sign their records into the checkout's ``results/`` as they finish; the
    next run in that checkout must still name its commit, clean. A change to code must not."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "_signed_index.json").write_text("{}")
    (tmp_path / "harness.py").write_text("x = 1\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.strip()
    (tmp_path / "results" / "_signed_index.json").write_text('{"a": 1}')
    assert code_version(tmp_path) == head
    (tmp_path / "harness.py").write_text("x = 2\n")
    assert code_version(tmp_path) == f"{head}+dirty"


def test_a_record_names_the_processor_it_ran_on():
    """Two machines' numbers are compared by name (docs/results.md: a reproduction)."""
    model = cpu_model()
    assert model and model == hardware()["cpu_model"]
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        assert model in cpuinfo.read_text()

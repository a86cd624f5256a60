"""Test-session environment, set at import time, before anything imports transformers.

The hub is off (a hub call fails at once instead of retrying DNS for ~47 s), and every cache
(Hugging Face, fedsynth's own) and the entry-signing key point into a throw-away session
directory.
"""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from host_facts import cpu_and_caches

_SESSION_DIR = tempfile.mkdtemp(prefix="fedsynth-tests-")
atexit.register(shutil.rmtree, _SESSION_DIR, ignore_errors=True)

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["TQDM_DISABLE"] = "1"  # progress bars (benchmark.progress) stay quiet in tests
# one torch/OpenMP thread: on a shared 2-core box, 2 spinning threads made small-model
# forwards 7-100x slower (measured); set OMP_NUM_THREADS yourself to override
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HOME"] = os.path.join(_SESSION_DIR, "huggingface")
os.environ["FEDSYNTH_CACHE"] = os.path.join(_SESSION_DIR, "fedsynth")
# entries are signed with a throw-away key, never the host's ~/.config/fedsynth one
os.environ["FEDSYNTH_SIGNING_KEY"] = os.path.join(_SESSION_DIR, "signing-key.pem")
# and the indexes this machine verified are remembered there too, not in ~/.config
os.environ["FEDSYNTH_VERIFIED_INDEXES"] = os.path.join(_SESSION_DIR, "verified_indexes.json")


def pytest_collection_modifyitems(items):
    """Files marked ``end_to_end`` (whole suites, grids and isolated runs: minutes each) go
    first, each file's tests in their own order. `make test` hands whole files to its
    pytest-xdist workers in this order (``--no-loadscope-reorder``), so the long files start
    at once; by default xdist orders files by test count, which left the Ray and quickstart
    files running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("end_to_end") is None)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module of tiny-model trainings (``pytestmark =
    pytest.mark.usefixtures("one_torch_thread")``): several times faster on a shared box."""
    from model_methods_support import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """The fake ``vllm`` (``tests/fakes/site-packages``) importable, its events written to
    ``tmp_path/events.jsonl``, and a tiny tokenizer saved as an engine's model directory:
    ``(tokenizer, model directory, events file)``; the fake is forgotten after."""
    from benchmark.profiles.tokenizer_builders import tiny_tokenizer

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fakes" / "site-packages"))
    monkeypatch.setenv("FEDSYNTH_FAKE_EVENTS", str(tmp_path / "events.jsonl"))
    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(tmp_path / "model")
    yield tokenizer, tmp_path / "model", tmp_path / "events.jsonl"
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"host: {cpu_and_caches()}")

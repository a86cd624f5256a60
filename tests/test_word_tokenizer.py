"""The word-level (TFF baseline) vocabulary of paper 002 and its accuracy counts."""

import json
import re

import numpy as np
import pytest

from benchmark.profiles.tokenizer_builders import EOS, PAD, tiny_tokenizer
from benchmark.profiles.word_tokenizer import (
    UNK,
    WORD_PATTERN,
    build_word_tokenizer,
    converted_token_accuracy,
    in_vocab_accuracy,
    word_pre_tokenize,
    word_token_lengths,
    word_tokenizer,
    word_tokenizer_key,
    word_tokenizer_path,
)

TRICKY = [
    "Don't use eval()! x=1, y's?",
    "  Tabs\tand\nnewlines\u00a0NBSP  ",
    "C++ & C#: 3.14 vs. 2,718 -- don't!!",
    "<pad> <unk> <|endoftext|> are text here",
    "ÉCOLE café naïve ŁÓDŹ",
    "snake_case 'quoted' \"double\" a/b",
    "",
]

CORPUS = [
    "the cat sat on the mat.",
    "The dog sat, the cat ran!",
    "a b c a b a",
    "zebra yak zebra yak",
]


def test_pre_tokenize_examples():
    assert word_pre_tokenize("Don't use eval()! x=1, y's?") == [
        "don't", "use", "eval", "(", ")", "!", "x", "=", "1", ",", "y's", "?",
    ]  # fmt: skip
    assert word_pre_tokenize("") == []
    assert word_pre_tokenize("a  b\t\nc") == ["a", "b", "c"]
    assert word_pre_tokenize("<pad>") == ["<", "pad", ">"]


def test_pre_tokenize_matches_a_python_reference():
    import regex  # installed with transformers

    for text in TRICKY:
        reference = regex.findall(WORD_PATTERN, text.lower())
        assert word_pre_tokenize(text) == reference, text


def test_fast_tokenizer_agrees_with_pre_tokenizer():
    tok = build_word_tokenizer(TRICKY, 1000)  # every word of TRICKY is in the vocabulary
    for text in TRICKY:
        words = word_pre_tokenize(text)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.convert_ids_to_tokens(ids) == words, text
        assert tok.unk_token_id not in ids
        assert tok(text)["input_ids"] == ids  # no bos/eos added either way


def test_top_k_with_ties_is_deterministic_and_oov_maps_to_unk():
    # counts: the 4, a 3, b 2, cat 2, sat 2, yak 2, zebra 2, then singletons
    tok = build_word_tokenizer(CORPUS, 3 + 4)
    vocab = tok.get_vocab()
    assert [tok.convert_ids_to_tokens(i) for i in range(len(tok))] == [
        EOS, PAD, UNK, "the", "a", "b", "cat",
    ]  # fmt: skip
    assert len(tok) == len(vocab) == 7
    assert (tok.eos_token, tok.bos_token, tok.pad_token, tok.unk_token) == (EOS, EOS, PAD, UNK)
    assert (tok.eos_token_id, tok.pad_token_id, tok.unk_token_id) == (0, 1, 2)
    ids = tok("The zebra sat on a CAT", add_special_tokens=False)["input_ids"]
    assert ids == [3, 2, 2, 2, 4, 6]
    # literal special-token text is words too, never a special id
    assert tok("<pad>", add_special_tokens=False)["input_ids"] == [2, 2, 2]
    # same vocabulary whatever the document order
    shuffled = build_word_tokenizer(list(reversed(CORPUS)), 3 + 4)
    assert shuffled.get_vocab() == vocab
    # a vocabulary larger than the corpus holds every word once
    everything = build_word_tokenizer(CORPUS, 10_000)
    words = {w for text in CORPUS for w in word_pre_tokenize(text)}
    assert len(everything) == 3 + len(words)
    with pytest.raises(ValueError):
        build_word_tokenizer(CORPUS, 3)


def test_decode_joins_words_with_spaces():
    tok = build_word_tokenizer(TRICKY, 1000)
    for text in TRICKY:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == " ".join(word_pre_tokenize(text))
    assert tok.decode([0, 1, 2]) == f"{EOS} {PAD} {UNK}"
    ids = tok("Don't use", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == "don't use"


def test_cache_returns_equal_tokenizer_and_rebuilds_tampered_files():
    first = word_tokenizer(CORPUS, 8, "unit")
    path = word_tokenizer_path("unit", word_tokenizer_key(CORPUS, 8))
    assert path.exists() and path.parent.name == "word_unigram"
    assert path.name.startswith("unit-")
    assert first.get_vocab() == build_word_tokenizer(CORPUS, 8).get_vocab()
    original = path.read_bytes()

    again = word_tokenizer(CORPUS, 8, "unit")
    assert again.get_vocab() == first.get_vocab()
    assert path.read_bytes() == original

    path.write_text("garbage {")  # unparseable: rebuilt
    assert word_tokenizer(CORPUS, 8, "unit").get_vocab() == first.get_vocab()
    assert path.read_bytes() == original

    envelope = json.loads(original)
    envelope["key"] = "0" * 20  # key mismatch: rebuilt
    path.write_text(json.dumps(envelope))
    assert word_tokenizer(CORPUS, 8, "unit").get_vocab() == first.get_vocab()
    assert path.read_bytes() == original

    envelope = json.loads(original)  # right key, planted vocabulary: digest mismatch
    envelope["tokenizer"] = envelope["tokenizer"].replace('"the"', '"evil"')
    path.write_text(json.dumps(envelope))
    assert "evil" not in word_tokenizer(CORPUS, 8, "unit").get_vocab()
    assert path.read_bytes() == original

    # another size or corpus is another key, another file
    assert word_tokenizer_key(CORPUS, 9) != word_tokenizer_key(CORPUS, 8)
    assert word_tokenizer_key(CORPUS[:-1], 8) != word_tokenizer_key(CORPUS, 8)
    assert word_tokenizer_key(["ab", "c"], 8) != word_tokenizer_key(["a", "bc"], 8)
    assert not list(path.parent.glob(".*.part"))  # no temporary file left behind
    with pytest.raises(ValueError):
        word_tokenizer(CORPUS, 8, "../escape")


def test_in_vocab_accuracy_hand_made():
    oov, pad, eos = 2, 1, 0
    target = np.array([[5, 2, 7, 8, 0, 1], [9, 9, 2, 4, 1, 1]])
    predicted = np.array([[5, 2, 3, 8, 0, 1], [9, 2, 6, 4, 1, 0]])
    # counted targets: 5 7 8 | 9 9 4 -> 6; correct: 5 8 | 9 4 -> 4
    # (the OOV target predicted OOV is not counted; a predicted OOV for 9 is wrong)
    assert in_vocab_accuracy(predicted, target, oov, [pad, eos]) == (4, 6)
    assert in_vocab_accuracy(predicted.tolist(), target.tolist(), oov, {pad, eos}) == (4, 6)
    assert in_vocab_accuracy(predicted, target, oov, []) == (7, 10)
    with pytest.raises(ValueError):
        in_vocab_accuracy(predicted[:, :3], target, oov, [pad])


def test_converted_token_accuracy_counts_oov_tokens_in_the_denominator():
    oov, pad = 2, 1
    target = np.array([5, 2, 7, 8, 1])
    predicted = np.array([5, 2, 3, 8, 0])
    lengths = np.array([1, 4, 2, 3, 99])  # the OOV word's true length is 4; pad ignored
    assert converted_token_accuracy(predicted, target, lengths, oov, [pad]) == (1 + 3, 10)
    with pytest.raises(ValueError):
        converted_token_accuracy(predicted, target, lengths[:3], oov, [pad])


def test_name_pattern_is_used_in_the_filename():
    path = word_tokenizer_path("stackoverflow-public_v1.2", "k" * 20)
    assert re.fullmatch(r"stackoverflow-public_v1\.2-k{20}\.json", path.name)


def test_word_token_lengths_match_encoding_each_word_after_a_space():
    subword = tiny_tokenizer()
    words = ["the", "garden", "x", "unbelievable"]
    expected = [max(1, len(subword(" " + w, add_special_tokens=False)["input_ids"])) for w in words]
    assert word_token_lengths(words, subword).tolist() == expected
    assert word_token_lengths([], subword).shape == (0,)

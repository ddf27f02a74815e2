from pathlib import Path

import pytest

from showtell.captioning.data.vocab import END, START, UNKNOWN, Vocabulary, tokenize
from showtell.common.errors import DataError


def test_tokenize_lowercases_and_splits_punctuation():
    assert tokenize("A Red circle, left of a BLUE square.") == [
        "a", "red", "circle", ",", "left", "of", "a", "blue", "square", "."]


def test_build_counts_min_count_and_specials_first():
    vocab = Vocabulary.build(["a red circle", "a blue circle", "a red square"], min_count=2)
    assert vocab.words[:3] == (START, END, UNKNOWN)
    assert vocab.words[3:] == ("a", "circle", "red")  # by count, then alphabetically
    assert vocab.counts[2] == 2  # "blue" and "square" fell below min count
    ids = vocab.encode("a blue circle")
    assert ids == [vocab.start_id, vocab.word_to_id("a"), vocab.unknown_id, vocab.word_to_id("circle"),
                   vocab.end_id]
    assert vocab.decode(ids) == "a <UNK> circle"
    assert vocab.decode([vocab.start_id, 3, vocab.end_id, 4]) == "a"  # stops at </S>


def test_save_load_round_trip(tmp_path: Path):
    vocab = Vocabulary.build(["a red circle", "a blue square"])
    vocab.save(tmp_path / "vocab.txt")
    assert Vocabulary.load(tmp_path / "vocab.txt") == vocab


def test_load_rejects_malformed_file_naming_line(tmp_path: Path):
    path = tmp_path / "vocab.txt"
    path.write_text("<S> 3\n</S> 3\n<UNK> 0\nred\n")
    with pytest.raises(DataError, match=r"vocab.txt:4: expected 'word count'"):
        Vocabulary.load(path)

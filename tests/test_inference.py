"""Beam search keeps the best k hypotheses: exact when the beam covers every sequence."""

from __future__ import annotations

import itertools

import numpy as np
import tensorflow as tf

from showtell.captioning.model.inference import beam_search, top_k_rows

START, END = 0, 1


def _markov_step(table: np.ndarray):
    """A decoder whose next-word log-probs depend only on the previous word."""
    log_table = tf.constant(np.log(table), tf.float32)

    def step(words, state):
        return tf.gather(log_table, words), state

    return step


def _brute_force(table: np.ndarray, max_length: int) -> list[tuple[float, tuple[int, ...]]]:
    """Every complete caption (ending in </S>) and every max-length unfinished one, scored."""
    vocab = table.shape[0]
    out = []
    for length in range(1, max_length + 1):
        for seq in itertools.product(range(vocab), repeat=length):
            if END in seq[:-1]:
                continue
            if length < max_length and seq[-1] != END:
                continue
            prev, score = START, 0.0
            for w in seq:
                score += np.log(table[prev, w])
                prev = w
            out.append((score, seq))
    return sorted(out, key=lambda s: -s[0])


def _table(seed: int, vocab: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = rng.dirichlet(np.ones(vocab) * 0.7, size=vocab)
    return table


def test_exhaustive_beam_equals_brute_force_top_k():
    vocab, max_length = 4, 3
    for seed in range(5):
        table = _table(seed, vocab)
        beam = vocab**max_length  # wide enough to never prune
        state = tf.zeros([2, 1])  # batch of 2 identical images
        ids, scores = beam_search(state, _markov_step(table), START, END, beam_size=beam,
                                  max_length=max_length)
        expected = _brute_force(table, max_length)
        got = []
        for seq, score in zip(ids[0].numpy(), scores[0].numpy(), strict=True):
            if score < -1e8:
                continue
            seq = tuple(int(w) for w in seq)
            if END in seq:
                seq = seq[: seq.index(END) + 1]
            got.append((float(score), seq))
        assert len(got) == len(expected)
        for (gs, gseq), (es, eseq) in zip(got[:10], expected[:10], strict=True):
            assert abs(gs - es) < 1e-4
            assert gseq == eseq or abs(gs - es) < 1e-6  # ties may come in either order
        np.testing.assert_allclose(scores[0].numpy(), scores[1].numpy())
        assert (np.diff(scores[0].numpy()) <= 1e-6).all()  # best first


def test_beam_finds_what_greedy_misses():
    # From <S>: word 2 (p .6) leads only to poor continuations, word 3 (p .4) to a sure end.
    table = np.full((4, 4), 1e-6)
    table[START] = [1e-6, 1e-6, 0.6, 0.4]
    table[2] = [1e-6, 0.3, 0.35, 0.35]
    table[3] = [1e-6, 0.98, 0.01, 0.01]
    table[END] = [1e-6, 1.0, 1e-6, 1e-6]
    table /= table.sum(axis=1, keepdims=True)
    step = _markov_step(table)
    greedy, _ = beam_search(tf.zeros([1, 1]), step, START, END, beam_size=1, max_length=2)
    beam, scores = beam_search(tf.zeros([1, 1]), step, START, END, beam_size=3, max_length=2)
    assert greedy.numpy()[0, 0].tolist()[0] == 2
    assert beam.numpy()[0, 0].tolist() == [3, END]
    assert abs(float(scores[0, 0]) - np.log(0.4 * 0.98)) < 1e-3


def test_finished_hypotheses_keep_their_score():
    table = _table(7, 5)
    ids, scores = beam_search(tf.zeros([1, 1]), _markov_step(table), START, END, beam_size=3,
                              max_length=6)
    for seq, score in zip(ids[0].numpy(), scores[0].numpy(), strict=True):
        seq = list(seq)
        prev, total = START, 0.0
        for w in seq:
            total += np.log(table[prev, w])
            if w == END:
                break
            prev = w
        assert abs(total - score) < 1e-3
        if END in seq:
            assert all(w == END for w in seq[seq.index(END):])


def test_the_search_ends_when_every_hypothesis_has_and_traces_its_step_once():
    # From <S>: word 2 or 3; after either, </S> all but surely — every hypothesis ends at step 2.
    table = np.full((4, 4), 1e-6)
    table[START] = [1e-6, 1e-6, 0.7, 0.3]
    table[2] = table[3] = table[END] = [1e-6, 1.0, 1e-6, 1e-6]
    table /= table.sum(axis=1, keepdims=True)
    calls = []
    markov = _markov_step(table)

    def step(words, state):
        calls.append(1)
        return markov(words, state)

    ids, scores = beam_search(tf.zeros([1, 1]), step, START, END, beam_size=2, max_length=20)
    assert len(calls) == 2  # not 20
    assert ids.numpy()[0].tolist() == [[2] + [END] * 19, [3] + [END] * 19]  # </S> repeats after the end
    np.testing.assert_allclose(scores.numpy()[0], np.log([0.7, 0.3]), atol=1e-4)

    calls.clear()
    search = tf.function(lambda state: beam_search(state, step, START, END, beam_size=2, max_length=20))
    traced, _ = search(tf.zeros([3, 1]))
    assert len(calls) == 1  # one trace of the step, not one per position
    np.testing.assert_array_equal(traced.numpy(), np.repeat(ids.numpy(), 3, axis=0))


def _flat_beam_search(log_table: np.ndarray, batch: int, k: int,
                      max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """The search as first written, over every word of every hypothesis at once (numpy, stable
    sorts: ties to the lower index) — the reference the candidates-only search must equal."""
    vocab = log_table.shape[0]
    words = np.full(batch * k, START)
    scores = np.tile([0.0] + [-1e9] * (k - 1), (batch, 1))
    finished = np.zeros((batch, k), bool)
    ids = np.full((batch, k, max_length), END)
    only_end = np.where(np.arange(vocab) == END, 0.0, -1e9)
    for t in range(max_length):
        log_probs = log_table[words].reshape(batch, k, vocab)
        log_probs = np.where(finished[..., None], only_end, log_probs)
        total = (scores[..., None] + log_probs).reshape(batch, k * vocab)
        flat = np.argsort(-total, axis=1, kind="stable")[:, :k]
        scores = np.take_along_axis(total, flat, 1)
        beam, word = flat // vocab, flat % vocab
        ids = np.take_along_axis(ids, beam[..., None], 1)
        ids[:, :, t] = word
        finished = np.take_along_axis(finished, beam, 1) | (word == END)
        words = word.reshape(-1)
    return ids, scores


def test_the_search_over_a_large_vocabulary_equals_the_search_over_every_word():
    """At 1,000 words each step takes each hypothesis' best words through ``top_k_rows``' chunks;
    the captions and scores are those of the search over all k × V candidates."""
    vocab, batch, k, max_length = 1000, 4, 3, 8
    table = np.random.default_rng(11).dirichlet(np.ones(vocab) * 0.05, size=vocab) + 1e-9
    table[:, END] = np.linspace(0.01, 0.3, vocab)  # some hypotheses end, at different steps
    log_table = np.log(table / table.sum(1, keepdims=True)).astype(np.float32)
    ids, scores = beam_search(tf.zeros([batch, 1]), _markov_step(np.exp(log_table)), START, END,
                              beam_size=k, max_length=max_length)
    expected_ids, expected_scores = _flat_beam_search(log_table.astype(np.float64), batch, k, max_length)
    assert (expected_ids == END).any() and not (expected_ids == END).all()
    np.testing.assert_array_equal(ids.numpy(), expected_ids)
    np.testing.assert_allclose(scores.numpy(), expected_scores, rtol=1e-5)


def test_top_k_rows_is_top_k_ties_and_padding_included():
    """``top_k_rows``: the values and indices of ``tf.math.top_k``, with many equal values (ties to
    the lower index) and at a vocabulary no chunk size divides (padded), or too small to chunk."""
    rng = np.random.default_rng(5)
    for vocab in (12000, 1009, 200):
        for x in (rng.normal(size=(16, vocab)), rng.integers(0, 4, size=(16, vocab))):
            x = tf.constant(x, tf.float32)
            values, indices = top_k_rows(x, 3)
            expected = tf.math.top_k(x, 3)
            np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
            np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())
    # A tie across chunks whose maxima differ: the chunk with the larger maximum comes later in
    # the row, and its 2 must still lose to the earlier chunk's two.
    row = np.zeros((1, 1000), np.float32)
    row[0, [0, 1, 100, 101]] = [2, 2, 5, 2]
    assert top_k_rows(tf.constant(row), 3)[1].numpy().tolist() == [[100, 0, 1]]

"""The sparse arithmetic against FlagEmbedding's loop, case by case and on random input."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bge_m3_sparse_plugin import _sparse as sparse
from bge_m3_sparse_plugin._sparse import (
    lexical_weights,
    lexical_weights_batch,
    lexical_weights_flat_compiled,
    lexical_weights_flat_numpy,
    split_pooled_outputs,
)

from .support.reference import reference_lexical_weights, reference_prune

SKIP = frozenset({0, 1, 2, 3})  # <s>, <pad>, </s>, <unk>


IMPLEMENTATIONS = {
    "numpy": lexical_weights_flat_numpy,
    "compiled": lexical_weights_flat_compiled,
}


def fast(ids, weights, skip=SKIP, impl=lexical_weights_flat_numpy) -> dict[int, float]:
    ids = np.asarray(ids, dtype=np.int64)
    out_ids, out_w, bounds = impl(
        ids, np.asarray(weights, dtype=np.float32), np.array([ids.size]), skip
    )
    assert bounds.tolist() == [0, out_ids.size]
    return dict(zip(out_ids.tolist(), out_w.tolist()))


def ref(ids, weights, skip=SKIP) -> dict[int, float]:
    return reference_lexical_weights(np.asarray(weights, dtype=np.float32), list(ids), skip)


def assert_same(ids, weights, skip=SKIP):
    """Both implementations equal FlagEmbedding's loop: order, ids and exact fp32 values."""
    want = ref(ids, weights, skip)
    for name, impl in IMPLEMENTATIONS.items():
        got = fast(ids, weights, skip, impl)
        assert list(got.items()) == list(want.items()), name
    return got


def test_special_ids_dropped_anywhere():
    got = assert_same([5, 2, 6, 0, 7, 1, 8, 3, 9], [0.1, 0.9, 0.2, 0.9, 0.3, 0.9, 0.4, 0.9, 0.5])
    assert list(got) == [5, 6, 7, 8, 9]


def test_duplicates_keep_max_in_first_kept_order():
    got = assert_same([7, 5, 7, 5, 9], [0.1, 0.5, 0.8, 0.2, 0.3])
    assert list(got) == [7, 5, 9]
    assert got[7] == pytest.approx(0.8) and got[5] == pytest.approx(0.5)


def test_first_kept_occurrence_sets_the_order_not_the_first_occurrence():
    # id 7 first appears with a negative weight: it is placed where it is first kept.
    got = assert_same([7, 5, 7], [-0.1, 0.5, 0.8])
    assert list(got) == [5, 7]


def test_zero_and_negative_weights_dropped():
    got = assert_same([4, 5, 6, 7], [0.0, -0.0, -1.0, 1e-30])
    assert list(got) == [7]


def test_empty_inputs():
    assert assert_same([], []) == {}
    assert assert_same([0, 2], [0.5, 0.5]) == {}
    assert assert_same([4, 5], [-1.0, 0.0]) == {}


def test_no_skip_ids():
    assert assert_same([0, 2, 0], [0.1, 0.2, 0.3], skip=frozenset()) == pytest.approx(
        {0: 0.3, 2: 0.2}
    )


def test_weights_keep_fp32_values():
    w = np.float32(0.1234567)
    got = fast([4], [w])
    assert got[4] == float(w)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="as many weights as token ids"):
        lexical_weights(np.array([1, 2]), np.array([0.5]), SKIP)
    with pytest.raises(ValueError, match="1-D"):
        lexical_weights(np.array([[1, 2]]), np.array([[0.5, 0.5]]), SKIP)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=12),
            st.one_of(
                st.floats(min_value=-2, max_value=2, allow_nan=False, width=32),
                st.sampled_from([0.0, -0.0, 1.0]),
            ),
        ),
        max_size=80,
    )
)
def test_equals_reference_on_random_input(pairs):
    ids = [p[0] for p in pairs]
    weights = [p[1] for p in pairs]
    assert_same(ids, weights)


def test_split_pooled_outputs_lines_weights_up_with_ids():
    # Three sequences: <s> a b </s> with dense 2; a literal </s> inside and no
    # final EOS; only <s> </s> (an empty text). Dense values are 9s.
    token_ids = np.array([0, 5, 6, 2, 0, 7, 2, 8, 0, 2])
    token_lengths = np.array([4, 4, 2])
    values = np.array([9, 9, 0.5, 0.6, 9, 9, 0.7, 0.1, 0.8, 9, 9], dtype=np.float32)
    value_lengths = np.array([4, 5, 2])
    ids, weights, n_weights, dense_starts = split_pooled_outputs(
        token_ids, token_lengths, values, value_lengths, 2, bos_token_id=0, eos_token_id=2
    )
    assert ids.tolist() == [5, 6, 7, 2, 8]
    assert weights.tolist() == pytest.approx([0.5, 0.6, 0.7, 0.1, 0.8])
    assert n_weights.tolist() == [2, 3, 0]
    assert dense_starts.tolist() == [0, 4, 9]


def test_split_pooled_outputs_rejects_a_length_mismatch():
    with pytest.raises(ValueError, match="3 token weights for a sequence of 4 tokens; expected 2"):
        split_pooled_outputs(
            np.array([0, 5, 6, 2]), np.array([4]), np.zeros(3, np.float32), np.array([3]), 0, 0, 2
        )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=9),
                st.floats(min_value=-1, max_value=1, allow_nan=False, width=32),
            ),
            max_size=30,
        ),
        max_size=6,
    )
)
def test_batch_equals_reference_per_sequence(sequences):
    assert_batch_equals_reference(sequences)


def assert_batch_equals_reference(sequences) -> None:
    """Per sequence, the batch call equals the reference; on the concatenated
    batch, the numpy and compiled passes give the very same arrays."""
    ids = [np.array([p[0] for p in s], dtype=np.int64) for s in sequences]
    weights = [np.array([p[1] for p in s], dtype=np.float32) for s in sequences]
    got = lexical_weights_batch(ids, weights, SKIP)
    assert len(got) == len(sequences)
    for (out_ids, out_w), i, w in zip(got, ids, weights):
        want = ref(i.tolist(), w)
        assert list(zip(out_ids.tolist(), out_w.tolist())) == list(want.items())
    if sequences:
        flat = (np.concatenate(ids), np.concatenate(weights), np.array(list(map(len, ids))), SKIP)
        for a, b in zip(lexical_weights_flat_numpy(*flat), lexical_weights_flat_compiled(*flat)):
            assert a.dtype == b.dtype and a.tolist() == b.tolist()


def test_batch_of_nothing():
    assert lexical_weights_batch([], [], SKIP) == []


def prune(sequences, top_k, min_weight):
    """sparse.prune on concatenated (id, weight) sequences, split back by the
    bounds it returns."""
    lengths = [len(s) for s in sequences]
    weights = np.array([w for s in sequences for _, w in s], dtype=np.float32)
    ids = np.array([t for s in sequences for t, _ in s], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    out_ids, out_w, new_bounds = sparse.prune(ids, weights, bounds, top_k, min_weight)
    assert new_bounds[0] == 0 and new_bounds[-1] == out_ids.size == out_w.size
    return [
        [(int(out_ids[i]), float(out_w[i])) for i in range(a, b)]
        for a, b in zip(new_bounds[:-1].tolist(), new_bounds[1:].tolist())
    ]


def test_top_k_keeps_the_largest_in_their_order_ties_to_the_earlier():
    seq = [(5, 0.25), (6, 0.75), (7, 0.5), (8, 0.75), (9, 0.5)]
    assert prune([seq], 3, None) == [[(6, 0.75), (7, 0.5), (8, 0.75)]]
    assert prune([seq], 1, None) == [[(6, 0.75)]]
    assert prune([seq], 10, None) == [seq]


def test_top_k_compares_exact_weights():
    # Weights one float32 step apart are not a tie: the larger one is kept.
    low = float(np.float32(0.5))
    high = float(np.nextafter(np.float32(0.5), np.float32(1)))
    assert prune([[(5, low), (6, high)]], 1, None) == [[(6, high)]]
    seq = [(5, 0.28125), (6, 0.3125), (7, 0.34375)]  # exact in float32, all near 0.3
    assert prune([seq], 2, None) == [[(6, 0.3125), (7, 0.34375)]]


def test_min_weight_keeps_weights_at_or_above_it():
    seq = [(5, 0.25), (6, 0.75), (7, 0.5)]
    assert prune([seq], None, 0.5) == [[(6, 0.75), (7, 0.5)]]
    assert prune([seq], None, 0.8) == [[]]


def test_pruning_is_per_sequence():
    a = [(5, 0.25), (6, 0.75)]
    b = [(7, 0.5), (8, 0.125), (9, 1.0)]
    assert prune([a, [], b], 1, 0.3) == [[(6, 0.75)], [], [(9, 1.0)]]


def test_min_weight_compares_the_reported_value():
    # 0.1 is not a float32; the weight reported for float32(0.1) is just above it.
    w = float(np.float32(0.1))
    assert prune([[(5, w)]], None, 0.1) == [[(5, w)]]
    assert prune([[(5, w)]], None, w) == [[(5, w)]]
    assert prune([[(5, w)]], None, np.nextafter(w, 1.0)) == [[]]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.integers(min_value=4, max_value=50),
                st.sampled_from([0.125, 0.25, 0.5, 1.0])
                | st.floats(min_value=2**-20, max_value=3, allow_nan=False, width=32),
            ),
            max_size=25,
        ),
        max_size=5,
    ),
    st.none() | st.integers(min_value=1, max_value=30),
    st.none() | st.floats(min_value=0, max_value=3, allow_nan=False),
)
def test_prune_equals_reference_on_random_input(sequences, top_k, min_weight):
    sequences = [[(t, float(np.float32(w))) for t, w in s] for s in sequences]
    want = [reference_prune(s, top_k, min_weight) for s in sequences]
    assert prune(sequences, top_k, min_weight) == want


def test_compiled_pass_is_made_ready_in_the_background():
    code = (
        "from bge_m3_sparse_plugin import _sparse as sparse;"
        "before = sparse.compiled_ready();"
        "sparse.start_compiling();"
        "sparse._compile_thread.join(120);"
        "print(before, sparse.compiled_ready())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_dispatcher_takes_the_compiled_pass_once_ready(monkeypatch):
    lexical_weights_flat_compiled(np.array([5]), np.ones(1, np.float32), np.array([1]), SKIP)
    assert sparse.compiled_ready()
    calls = []
    real = sparse.lexical_weights_flat_compiled
    monkeypatch.setattr(
        sparse, "lexical_weights_flat_compiled", lambda *a: calls.append(1) or real(*a)
    )
    out = lexical_weights(np.array([5, 6, 5]), np.array([0.25, 0.5, 0.75], np.float32), SKIP)
    assert calls == [1]
    assert out[0].tolist() == [5, 6] and out[1].tolist() == [0.75, 0.5]
    # Other weight types take the numpy path, which needs no compilation for them.
    out = lexical_weights(np.array([5, 6, 5]), np.array([0.25, 0.5, 0.75], np.float64), SKIP)
    assert calls == [1] and out[1].dtype == np.float64


def test_compiled_pass_refuses_negative_ids():
    with pytest.raises(ValueError, match="token ids must be >= 0"):
        lexical_weights_flat_compiled(
            np.array([5, -1]), np.ones(2, np.float32), np.array([2]), SKIP
        )


# Token ids past 65,535 take the numpy path's high radix digit (ids >> 16),
# up to bge-m3's vocabulary of 250,002: drawn from a pool, so that the same id
# comes back in a sequence (the max-merge) and ids share a low 16-bit digit.
_HIGH_IDS = st.sampled_from(
    [
        0,
        1,
        2,
        65_535,
        65_536,
        65_537,
        131_072,
        131_073,
        196_608 + 7,
        250_001,
        7,
        65_536 + 7,
        131_072 + 7,
    ]
) | st.integers(min_value=65_536, max_value=250_001)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(_HIGH_IDS, st.floats(min_value=-1, max_value=2, allow_nan=False, width=32)),
            max_size=40,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_ids_past_65535_equal_the_reference(sequences):
    assert_batch_equals_reference(sequences)


def test_a_batch_too_large_for_one_16_bit_key_is_split_and_equals_the_reference():
    """ids past 2**20 leave 11 bits of the key for the sequence: over 2,048
    sequences, the numpy pass splits the batch in two (and again), and must
    still equal the reference and the compiled pass."""
    rng = np.random.default_rng(20261204)
    sequences = [
        [
            (int(rng.integers(0, 2**20 + 5_000)), float(rng.uniform(-0.2, 1.0)))
            for _ in range(int(rng.integers(0, 6)))
        ]
        for _ in range(5_000)
    ]
    sequences[0] = [(2**20 + 4_999, 0.5), (7, 0.25), (2**20 + 4_999, 0.75)]  # the largest id, twice
    ids = np.concatenate([np.array([p[0] for p in s], dtype=np.int64) for s in sequences])
    high_bits = (int(ids.max()) >> 16).bit_length()
    assert (len(sequences) - 1) << high_bits > 0xFFFF  # the split is taken
    assert_batch_equals_reference(sequences)

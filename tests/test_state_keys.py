"""Order-preserving key encoding: encoded byte order == tuple order, prefixes are byte prefixes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstream.state.keys import KeyEncodingError, decode_key, encode_key, prefix_upper_bound

ints = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.sampled_from([-(2**63) - 1, -(2**63), 2**63 - 1, 2**63, -(2**64), 2**64, 0, -1, 1]),
)
texts = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=6)
blobs = st.binary(max_size=6) | st.sampled_from([b"", b"\x00", b"\x00\x00", b"\x00\x01", b"\xff"])

# Tuples with one fixed type per position (Python can only order such tuples).
shape = st.lists(st.sampled_from(["int", "str", "bytes"]), min_size=0, max_size=4)


def _tuples_of(kinds: list[str]) -> st.SearchStrategy[tuple]:
    parts = [{"int": ints, "str": texts, "bytes": blobs}[k] for k in kinds]
    return st.tuples(*parts)


@given(shape.flatmap(lambda kinds: st.tuples(_tuples_of(kinds), _tuples_of(kinds))))
def test_encoded_order_equals_tuple_order(pair: tuple[tuple, tuple]) -> None:
    a, b = pair
    ea, eb = encode_key(a), encode_key(b)
    assert (ea < eb) == (a < b)
    assert (ea == eb) == (a == b)
    assert decode_key(ea) == a


@given(
    shape.flatmap(
        lambda kinds: st.tuples(_tuples_of(kinds), st.integers(0, len(kinds)), _tuples_of(kinds))
    )
)
def test_prefix_tuple_is_byte_prefix_and_only_of_its_extensions(
    args: tuple[tuple, int, tuple],
) -> None:
    full, cut, other = args
    prefix = full[:cut]
    assert encode_key(full).startswith(encode_key(prefix))
    # Another tuple of the same shape starts with the encoded prefix iff it starts with the prefix.
    assert encode_key(other).startswith(encode_key(prefix)) == (other[:cut] == prefix)
    upper = prefix_upper_bound(encode_key(prefix))
    if upper is not None:
        assert encode_key(full) < upper


@given(st.lists(ints, min_size=2, max_size=10))
def test_integers_sort_like_numbers_across_size_classes(values: list[int]) -> None:
    encoded = sorted(values, key=lambda v: encode_key((v,)))
    assert encoded == sorted(values)


def test_shorter_tuple_sorts_before_its_extensions_and_none_is_supported() -> None:
    keys = [("a", 2), ("a",), ("a", 1), (None,), ("a", 1, b"x"), (), (b"a",), (3,)]
    by_bytes = sorted(keys, key=encode_key)
    assert by_bytes == [(), (None,), (3,), ("a",), ("a", 1), ("a", 1, b"x"), ("a", 2), (b"a",)]
    assert decode_key(encode_key((None, True, b"\x00z"))) == (None, 1, b"\x00z")


def test_unsupported_component_and_garbage_bytes_are_rejected() -> None:
    with pytest.raises(KeyEncodingError, match="float"):
        encode_key((1.5,))
    with pytest.raises(KeyEncodingError, match="too large"):
        encode_key((2 ** (8 * 256),))
    with pytest.raises(KeyEncodingError):
        decode_key(b"\x09")
    with pytest.raises(KeyEncodingError):
        decode_key(b"\x05abc")  # unterminated
    with pytest.raises(KeyEncodingError):
        decode_key(b"\x03\x00\x01")  # truncated int


def test_prefix_upper_bound() -> None:
    assert prefix_upper_bound(b"") is None
    assert prefix_upper_bound(b"\xff\xff") is None
    assert prefix_upper_bound(b"ab") == b"ac"
    assert prefix_upper_bound(b"a\xff") == b"b"

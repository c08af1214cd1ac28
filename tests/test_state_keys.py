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


# -- decode_key fast paths ------------------------------------------------------------

any_component = st.one_of(st.none(), st.booleans(), ints, texts, blobs)


@pytest.mark.parametrize(
    "key",
    [
        (3_600_000, 0, b"user0000001"),  # a window accumulator: the hottest shape
        (-1, -(2**63), 2**63 - 1, 0),  # int64 bounds and negatives
        (2**63, -(2**63) - 1, 2**200, -(2**200), 2 ** (8 * 255) - 1),  # beyond int64
        ("", b"", "", b""),  # empty text and bytes: just the terminator
        (b"\x00", b"a\x00b", b"\x00\x00\x01", b"\x00\xff", b"\x01\x00"),  # escaped zero bytes
        ("\x00", "a\x00\x01", "héllo", "\U0010ffff", "\ud800"),  # NUL, non-ASCII, lone surrogate
        (None, None),
        (None, 1, "a", b"b", None),
        ("wm",),
        (),
    ],
)
def test_decode_key_returns_exactly_the_encoded_tuple(key: tuple) -> None:
    decoded = decode_key(encode_key(key))
    assert decoded == key
    assert [type(p) for p in decoded] == [type(p) for p in key]


def test_bool_components_decode_as_the_int_they_equal() -> None:
    decoded = decode_key(encode_key((True, False, 7)))
    assert decoded == (1, 0, 7)
    assert [type(p) for p in decoded] == [int, int, int]


@given(st.lists(any_component, max_size=5))
def test_mixed_components_round_trip(parts: list) -> None:
    key = tuple(parts)
    decoded = decode_key(encode_key(key))
    assert decoded == key
    assert [type(p) for p in decoded] == [int if type(p) is bool else type(p) for p in key]


@given(st.lists(any_component, min_size=1, max_size=4), st.data())
def test_a_cut_encoding_decodes_to_a_prefix_or_is_rejected(
    parts: list, data: st.DataObject
) -> None:
    key = tuple(parts)
    encoded = encode_key(key)
    boundaries = {len(encode_key(key[:j])): key[:j] for j in range(len(key) + 1)}
    cut = data.draw(st.integers(0, len(encoded)))
    if cut in boundaries:
        assert decode_key(encoded[:cut]) == boundaries[cut]
    else:
        with pytest.raises(KeyEncodingError):
            decode_key(encoded[:cut])


@given(st.binary(max_size=24))
def test_arbitrary_bytes_decode_or_raise_a_value_error(data: bytes) -> None:
    try:
        assert isinstance(decode_key(data), tuple)
    except KeyEncodingError:
        pass
    except UnicodeDecodeError:
        pass  # a str component that is not UTF-8 (as before the fast path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x03\x80\x00\x00", "truncated"),  # int64 cut short
        (b"\x03" + bytes(8) + b"\x03\x80", "truncated"),  # second int64 cut short
        (b"\x03", "truncated"),
        (b"\x04", "truncated"),  # big int without its length
        (b"\x04\x09\x01\x02", "truncated"),  # big int shorter than its length
        (b"\x02\xfd\x01", "truncated"),
        (b"\x06", "unterminated"),
        (b"\x06abc", "unterminated"),
        (b"\x06abc\x00", "unterminated"),  # zero byte at the very end
        (b"\x06a\x00\xff", "unterminated"),  # an escape, then nothing
        (b"\x05a\x00\x02\x00\x01", "bad escape"),
        (b"\x06\x00\x00", "bad escape"),
        (b"\x07", "unknown type tag 0x07"),
        (b"\x00", "unknown type tag 0x00"),
        (b"\x01\x09", "unknown type tag 0x09"),
    ],
)
def test_malformed_encodings_are_rejected_with_the_reason(data: bytes, message: str) -> None:
    with pytest.raises(KeyEncodingError, match=message):
        decode_key(data)


def test_a_str_component_that_is_not_utf8_raises_unicode_decode_error() -> None:
    with pytest.raises(UnicodeDecodeError):
        decode_key(b"\x05\xff\xfe\x00\x01")


@given(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.one_of(st.binary(max_size=12), st.text(max_size=6)),
)
def test_window_key_shape_decodes_exactly_including_zero_bytes(
    a: int, b: int, last: object
) -> None:
    # (int64, int64, str | bytes) takes the one-piece fast path unless the last
    # component contains an escaped zero byte; both paths give the same tuple.
    key = (a, b, last)
    assert decode_key(encode_key(key)) == key


def test_window_key_shape_with_a_wrong_tail_is_still_rejected() -> None:
    good = encode_key((1, 2, b"ab"))
    with pytest.raises(KeyEncodingError):
        decode_key(good[:-1])  # terminator cut: falls back to the checked path
    with pytest.raises(KeyEncodingError):
        decode_key(good[:-2] + b"\x00\x07")  # bad escape

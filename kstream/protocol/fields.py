"""Plain JSON values checked against a frozen dataclass's field types and built into it,
for the control protocol's decoding (:func:`kstream.protocol.messages.decode`). Pure.

A checker is compiled once per type (a closure per field type), and a value's location
(``Resume.owners['t']``) is spelt out only when it is wrong: decoding one worker's batched
acknowledgement (hundreds of snapshots) costs a loop per field, not a type inspection and
a formatted string per value — at 100 000 tasks the coordinator decodes every task's
snapshot once per checkpoint (issue 41). Anything not of the declared type raises
:class:`FieldError` naming where and what; nothing is ever executed.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Union, get_args, get_origin, get_type_hints

Checker = Callable[[Any, str], Any]
"""``(value, where) -> value`` as the field's type, or FieldError naming ``where``."""


class FieldError(ValueError):
    """A JSON value is missing, extra or not of its field's type."""


_CHECKERS: dict[Any, Checker] = {}


def build(cls: type[Any], obj: dict[str, Any], where: str) -> Any:
    """An instance of the dataclass ``cls`` from the JSON object ``obj``, every field
    checked against its type; FieldError on a missing, extra or mistyped field."""
    return _checker(cls)(obj, where)


def _checker(hint: Any) -> Checker:
    checker = _CHECKERS.get(hint)
    if checker is None:
        checker = _CHECKERS[hint] = _compile(hint)
    return checker


def _fail(value: Any, hint: Any, where: str) -> FieldError:
    return FieldError(f"{where}: {value!r} is not {getattr(hint, '__name__', hint)}")


def _compile(hint: Any) -> Checker:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [_checker(o) for o in get_args(hint)]

        def union(value: Any, where: str) -> Any:
            for option in options:
                try:
                    return option(value, where)
                except FieldError:
                    continue
            raise FieldError(f"{where}: {value!r} is not {hint}")

        return union
    if hint is Any:
        return lambda value, _where: value  # any JSON value (e.g. offsets): data, never code
    if origin is tuple:
        item = _checker(get_args(hint)[0])

        def tuple_of(value: Any, where: str) -> Any:
            if not isinstance(value, list):
                raise _fail(value, hint, where)
            return tuple(item(v, where) for v in value)

        return tuple_of
    if origin is dict:
        val = _checker(get_args(hint)[1])

        def dict_of(value: Any, where: str) -> Any:
            if not isinstance(value, dict):
                raise _fail(value, hint, where)
            try:
                return {k: val(v, "") for k, v in value.items()}
            except FieldError:
                return {k: val(v, f"{where}[{k!r}]") for k, v in value.items()}

        return dict_of
    if isinstance(hint, type) and is_dataclass(hint):
        return _dataclass(hint)
    return _scalar(hint)


def _scalar(hint: Any) -> Checker:
    """None, bool, int (not bool), float (an int too: as float) or str."""
    if hint is float:

        def as_float(value: Any, where: str) -> Any:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
            raise _fail(value, hint, where)

        return as_float
    if hint is int:

        def as_int(value: Any, where: str) -> Any:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            raise _fail(value, hint, where)

        return as_int
    exact = {type(None): type(None), bool: bool, str: str}.get(hint)

    def as_exact(value: Any, where: str) -> Any:
        if exact is not None and isinstance(value, exact):
            return value
        raise _fail(value, hint, where)

    return as_exact


def _dataclass(cls: type[Any]) -> Checker:
    hints = get_type_hints(cls)
    names = frozenset(f.name for f in fields(cls))
    required = frozenset(
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    )
    checkers = {f.name: _checker(hints[f.name]) for f in fields(cls)}
    # A field of a plain type takes a value of exactly that type as it is (most values:
    # no call), and so does a ``dict[str, Any]`` take a dict (a JSON object's keys are
    # strings, its values JSON: a snapshot's offsets); any other value (an int for a
    # float, ...) goes through its checker.
    plain = {n: h for n, h in hints.items() if n in names and h in (str, int, float, bool)}
    plain |= {n: dict for n, h in hints.items() if n in names and h == dict[str, Any]}
    anything = frozenset(n for n, h in hints.items() if n in names and h is Any)

    def checked(value: dict[str, Any], where: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(v) is plain.get(k) or k in anything:
                out[k] = v
            else:
                out[k] = checkers[k](v, where and f"{where}.{k}")
        return out

    make = _maker(cls)

    def instance(value: Any, where: str) -> Any:
        if not isinstance(value, dict):
            raise _fail(value, cls, where)
        if not names.issuperset(value):
            raise FieldError(f"{where}: unexpected fields {sorted(set(value) - names)}")
        if not required.issubset(value):
            missing = next(n for n in checkers if n in required and n not in value)
            raise FieldError(f"{where}: missing field {missing!r}")
        try:  # the hot path: no place spelt out
            return make(checked(value, ""))
        except FieldError:  # checked again, each field's place named in its error
            return make(checked(value, where))

    return instance


def _maker(cls: type[Any]) -> Callable[[dict[str, Any]], Any]:
    """``cls(**kwargs)`` for checked ``kwargs``; for a plain frozen dataclass (no
    ``__post_init__``, no slots, every field in ``__init__``) the instance's ``__dict__``
    is filled directly, as its ``__init__`` would (one ``object.__setattr__`` a field made
    building a checkpoint's 100 000 snapshots a third of decoding them)."""
    fs = fields(cls)
    if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__") or not all(f.init for f in fs):
        return lambda kwargs: cls(**kwargs)
    order = [f.name for f in fs]
    defaults = {f.name: f.default for f in fs if f.default is not MISSING}
    factories = {f.name: f.default_factory for f in fs if f.default_factory is not MISSING}
    new = object.__new__

    def make(kwargs: dict[str, Any]) -> Any:
        obj = new(cls)
        if len(kwargs) < len(order):  # defaults filled in, in field order
            kwargs = {
                n: kwargs[n] if n in kwargs else defaults[n] if n in defaults else factories[n]()
                for n in order
            }
        obj.__dict__.update(kwargs)
        return obj

    return make

"""Value classes like the stdlib's ``@dataclass(frozen=True, slots=True)``, without it.

Importing `dataclasses` imports `inspect`, and with it ast, dis, tokenize and more:
about 15 ms, which every `slurm-heal check` run on every node would pay (issue 26). The
value types of the node side (`slurm_heal.types`, `slurm_heal.checks`) are made with
this module instead; it writes what the stdlib would for them:

* ``@dataclass(frozen=..., slots=..., eq=True)`` and ``field(default=...)`` /
  ``field(default_factory=...)``; fields come from the class annotations (a field with
  no default after one with a default is a TypeError, as in the stdlib);
* ``__init__`` (with ``__post_init__`` when the class has one), ``__repr__``
  (``Name(a=1, b='x')``), ``__eq__`` (same class, fields in order), ``__hash__`` for
  frozen classes, ``__match_args__``, ``__slots__``, pickling and `copy`;
* assigning to a frozen instance raises `FrozenInstanceError` (an AttributeError);
* `replace` (like `dataclasses.replace`).

The stdlib's own `dataclasses.fields`, `asdict`, `replace` and `is_dataclass` work on
these classes too: their ``__dataclass_fields__`` is built through the stdlib on first
use, so only code that asks for it imports `dataclasses`.

Not supported (a TypeError says so): ``order``, ``kw_only``, ``init=False``, ``InitVar``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from types import MemberDescriptorType

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any, TypeVar, overload

    from typing_extensions import dataclass_transform

    _T = TypeVar("_T")
    _C = TypeVar("_C", bound=type)

FIELDS = "__frozen_fields__"  # the class attribute: ((name, Field), ...) in order


class FrozenInstanceError(AttributeError):
    """Assigning to a field of a frozen instance."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """What ``field()`` returns in a class body: a default or a default factory."""

    __slots__ = ("default", "default_factory")

    def __init__(self, default: Any = MISSING,
                 default_factory: Callable[[], Any] | Any = MISSING) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.default = default
        self.default_factory = default_factory

    def __repr__(self) -> str:
        return f"Field(default={self.default!r}, default_factory={self.default_factory!r})"


def _field(default: Any, default_factory: Any) -> Any:
    return Field(default, default_factory)


# The typed signatures are for the type checker (typing stays off the check path); the
# functions that run are the plain ones below them, which call the typed ones.
if TYPE_CHECKING:
    @overload
    def field(*, default: _T) -> _T: ...
    @overload
    def field(*, default_factory: Callable[[], _T]) -> _T: ...
    def field(*, default: Any = ..., default_factory: Any = ...) -> Any: ...
else:
    def field(*, default=MISSING, default_factory=MISSING):
        """A field's default (``default=``) or the callable making one
        (``default_factory=``)."""
        return _field(default, default_factory)


def _annotations(cls: type) -> dict[str, Any]:
    return dict(cls.__dict__.get("__annotations__", {}))


def _is_classvar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar"))


def _collect(cls: type) -> tuple[tuple[str, Field], ...]:
    fields: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for name, f in getattr(base, FIELDS, ()):
            fields[name] = f
    for name, annotation in _annotations(cls).items():
        if _is_classvar(annotation):
            continue
        if isinstance(annotation, str) and annotation.startswith(("InitVar", "KW_ONLY")):
            raise TypeError(f"{cls.__name__}.{name}: InitVar and KW_ONLY are not supported "
                            "by slurm_heal.frozen")
        value = cls.__dict__.get(name, MISSING)
        fields[name] = value if isinstance(value, Field) else Field(default=value)
    seen_default = False
    for name, f in fields.items():
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if not has_default and seen_default:
            raise TypeError(f"non-default argument {name!r} follows default argument")
        seen_default = seen_default or has_default
    return tuple(fields.items())


def _slot_setter(cls: type, name: str) -> Any:
    """The setter of the slot that holds field ``name`` (None: not a slot). A frozen
    class's ``__init__`` writes through it: what ``object.__setattr__`` would call, found
    once instead of for every field of every instance (a fault storm makes thousands of
    records: issue 35)."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if found is not None:
            return found.__set__ if type(found) is MemberDescriptorType else None
    return None


def _init(cls: type, fields: tuple[tuple[str, Field], ...], frozen: bool) -> Any:
    """``__init__`` written out like the stdlib writes it (exec), so calling it costs what
    a hand-written one does and its signature names the fields."""
    env: dict[str, Any] = {"MISSING": MISSING, "__setattr__": object.__setattr__}
    params = []
    body = []
    for name, f in fields:
        if f.default_factory is not MISSING:
            env[f"_factory_{name}"] = f.default_factory
            params.append(f"{name}=MISSING")
            value = f"_factory_{name}() if {name} is MISSING else {name}"
        elif f.default is not MISSING:
            env[f"_default_{name}"] = f.default
            params.append(f"{name}=_default_{name}")
            value = name
        else:
            params.append(name)
            value = name
        setter = _slot_setter(cls, name) if frozen else None
        if setter is not None:
            env[f"_set_{name}"] = setter
            body.append(f"    _set_{name}(self, {value})")
        else:
            body.append(f"    __setattr__(self, {name!r}, {value})" if frozen
                        else f"    self.{name} = {value}")
    if "__post_init__" in dir(cls):
        body.append("    self.__post_init__()")
    src = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass")
    exec(src, env)  # noqa: S102 - code made from the class's own field names
    fn = env["__init__"]
    fn.__qualname__ = f"{cls.__qualname__}.__init__"
    return fn


def _methods(cls: type, names: tuple[str, ...], frozen: bool, eq: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    astuple: Callable[[Any], tuple[Any, ...]]
    if len(names) > 1:
        astuple = attrgetter(*names)  # C: a tuple of the fields, in order
    elif names:
        one = attrgetter(names[0])

        def astuple(self: Any) -> tuple[Any, ...]:
            return (one(self),)
    else:
        def astuple(self: Any) -> tuple[Any, ...]:
            return ()

    def __repr__(self: Any) -> str:
        key = (id(self), "repr")
        if key in _REPR_RUNNING:
            return "..."
        _REPR_RUNNING.add(key)
        try:
            inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        finally:
            _REPR_RUNNING.discard(key)
        return f"{self.__class__.__qualname__}({inner})"

    out["__repr__"] = __repr__
    if eq:
        def __eq__(self: Any, other: Any) -> Any:
            if other.__class__ is self.__class__:
                return astuple(self) == astuple(other)
            return NotImplemented

        out["__eq__"] = __eq__
        if frozen:
            def __hash__(self: Any) -> int:
                return hash(astuple(self))

            out["__hash__"] = __hash__
        else:
            out["__hash__"] = None
    if frozen:
        def __setattr__(self: Any, name: str, value: Any) -> None:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self: Any, name: str) -> None:
            raise FrozenInstanceError(f"cannot delete field {name!r}")

        out["__setattr__"] = __setattr__
        out["__delattr__"] = __delattr__

    def __getstate__(self: Any) -> tuple[Any, ...]:
        return tuple(astuple(self))

    def __setstate__(self: Any, state: tuple[Any, ...]) -> None:
        for n, v in zip(names, state, strict=True):
            object.__setattr__(self, n, v)

    out["__getstate__"] = __getstate__
    out["__setstate__"] = __setstate__
    return out


def _lazy_init(owner: type, fields: tuple[tuple[str, Field], ...], frozen: bool) -> Any:
    """An ``__init__`` that writes the real one (`_init`) on the first instance: a class
    the run never instantiates costs no compile (most of the node check's are not). Two
    threads making the first instances at once both write it; either one stays."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        real = _init(owner, fields, frozen)
        type.__setattr__(owner, "__init__", real)
        real(self, *args, **kwargs)

    return __init__


_REPR_RUNNING: set[tuple[int, str]] = set()


class _StdlibFields:
    """``__dataclass_fields__`` on first use: the stdlib's Field objects for the same
    fields (made by letting `dataclasses` process a copy of the class's annotations), so
    `dataclasses.fields`, `asdict`, `replace` and `is_dataclass` work on these classes."""

    def __get__(self, obj: Any, owner: type) -> dict[str, Any]:
        import dataclasses

        ns: dict[str, Any] = {"__annotations__": {}}
        for name, f in getattr(owner, FIELDS):
            ns["__annotations__"][name] = "Any"
            if f.default_factory is not MISSING:
                ns[name] = dataclasses.field(default_factory=f.default_factory)
            elif f.default is not MISSING:
                ns[name] = dataclasses.field(default=f.default)
        real: Any = dataclasses.dataclass(type(owner.__name__, (), ns))
        fields: dict[str, Any] = real.__dataclass_fields__
        type.__setattr__(owner, "__dataclass_fields__", fields)
        return fields


def _process(cls: type, frozen: bool, slots: bool, eq: bool) -> type:
    fields = _collect(cls)
    names = tuple(n for n, _ in fields)
    ns = {k: v for k, v in cls.__dict__.items()
          if k not in ("__dict__", "__weakref__") and k not in names}
    own = set(_annotations(cls))
    for key, value in _methods(cls, names, frozen, eq).items():
        if key == "__hash__" and cls.__dict__.get("__hash__") is not None:
            continue  # a __hash__ of the class's own stays (as with the stdlib)
        if key not in cls.__dict__ or key in ("__setattr__", "__delattr__", "__hash__"):
            ns[key] = value
    ns[FIELDS] = fields
    ns["__match_args__"] = names
    ns["__dataclass_fields__"] = _StdlibFields()
    if slots:
        inherited = {s for base in cls.__mro__[1:] for s in getattr(base, "__slots__", ())}
        ns["__slots__"] = tuple(n for n in names if n not in inherited)
    else:
        for name, f in fields:  # class-level defaults, as the stdlib leaves them
            if name in own and f.default is not MISSING:
                ns[name] = f.default
    new = type(cls)(cls.__name__, cls.__bases__, ns)
    new.__qualname__ = cls.__qualname__
    type.__setattr__(new, "__init__", _lazy_init(new, fields, frozen))
    return new


def _dataclass(cls: Any, frozen: bool, slots: bool, eq: bool,
               unsupported: dict[str, Any]) -> Any:
    if unsupported:
        raise TypeError(f"slurm_heal.frozen.dataclass does not support "
                        f"{', '.join(sorted(unsupported))}")

    def wrap(c: type) -> type:
        return _process(c, frozen, slots, eq)

    return wrap if cls is None else wrap(cls)


if TYPE_CHECKING:
    @overload
    def dataclass(cls: _C, /) -> _C: ...
    @overload
    def dataclass(*, frozen: bool = False, slots: bool = False,
                  eq: bool = True) -> Callable[[_C], _C]: ...
    @dataclass_transform(field_specifiers=(field, Field))
    def dataclass(cls: Any = None, /, *, frozen: bool = False, slots: bool = False,
                  eq: bool = True, **unsupported: Any) -> Any: ...
else:
    def dataclass(cls=None, /, *, frozen=False, slots=False, eq=True, **unsupported):
        """``@dataclass(frozen=True, slots=True)`` as the stdlib's (module docstring)."""
        return _dataclass(cls, frozen, slots, eq, unsupported)


def fields_of(cls: type) -> tuple[tuple[str, Any], ...]:
    """``(name, default)`` of every field of ``cls`` in order (a default factory is
    called; MISSING for a field without a default). Also for a class made with the
    stdlib's dataclass (a third-party detector's settings)."""
    own = getattr(cls, FIELDS, None)
    if own is None:
        import dataclasses  # only for a stdlib dataclass, which has imported it already

        std = dataclasses.fields(cls)
        return tuple((f.name, f.default_factory() if f.default_factory is not dataclasses.MISSING
                      else f.default if f.default is not dataclasses.MISSING else MISSING)
                     for f in std)
    return tuple((name, f.default_factory() if f.default_factory is not MISSING else f.default)
                 for name, f in own)


def maker(cls: type[_T]) -> Callable[..., _T]:
    """A fast positional constructor for a frozen class with slots made here: every field
    given, in order; it makes the instance ``cls(...)`` would (no ``__post_init__``).

    A frozen class's ``__init__`` writes each slot through its descriptor, which costs
    what a call costs; a fault storm makes two records a line (issue 35: <= 10 us an
    event). The maker writes the slots into an instance of a twin class with the same
    slots and no ``__setattr__`` of its own (a plain attribute store, the interpreter's
    fastest), then makes it an instance of ``cls`` (the same layout: CPython allows the
    ``__class__`` assignment exactly then), about half the cost."""
    fields = getattr(cls, FIELDS, None)
    if fields is None or "__slots__" not in cls.__dict__ or cls.__bases__ != (object,):
        raise TypeError(f"maker() needs a slurm_heal.frozen class with slots, not {cls!r}")
    if "__post_init__" in dir(cls):
        raise TypeError(f"maker() does not call {cls.__name__}.__post_init__")
    names = tuple(n for n, _ in fields)
    twin = type(f"_{cls.__name__}Maker", (), {"__slots__": names})
    src = (f"def make({', '.join(names)}):\n    obj = _new(_twin)\n"
           + "".join(f"    obj.{n} = {n}\n" for n in names)
           + "    obj.__class__ = _cls\n    return obj\n")
    env: dict[str, Any] = {"_new": object.__new__, "_twin": twin, "_cls": cls}
    exec(src, env)  # noqa: S102 - code made from the class's own field names
    make: Callable[..., _T] = env["make"]
    make.__qualname__ = f"maker({cls.__qualname__})"
    return make


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of ``obj`` with ``changes`` (like `dataclasses.replace`)."""
    fields = getattr(type(obj), FIELDS, None)
    if fields is None:
        raise TypeError(f"replace() should be called on a slurm_heal.frozen class, not "
                        f"{type(obj).__name__}")
    for key in changes:
        if not any(n == key for n, _ in fields):
            raise TypeError(f"{type(obj).__name__}.__init__() got an unexpected keyword "
                            f"argument {key!r}")
    values = {n: getattr(obj, n) for n, _ in fields}
    values.update(changes)
    return type(obj)(**values)


__all__ = ["MISSING", "Field", "FrozenInstanceError", "dataclass", "field", "fields_of",
           "maker", "replace"]

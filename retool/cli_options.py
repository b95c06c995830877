"""A command's options declared once, as the fields of the dataclass the command runs on.

A field made with ``option(default, help=...)`` is the option ``--<name with dashes>``: its annotation gives the
argparse type, its default the default (no default: a required option), ``X | None`` an option whose None default
means "not given". A ``bool`` is a switch: ``--name`` when it defaults to False, ``--no-name`` when it defaults to
True. ``add_options`` puts them on a parser and ``from_args`` makes the dataclass of what it parsed, so a new option
is one line, not a field, a parser line and a constructor argument that must agree. Fields made otherwise are not
options and keep their defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
KEY = "cli_option"  # the key of a field's metadata that holds its command-line settings


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    choices: Iterable[str] | None = None,
    metavar: str | None = None,
    minimum: float | None = None,
    **extra: Any,
) -> Any:
    """A dataclass field that is also a command-line option. ``minimum`` is checked by ``check_minimums``, not by
    argparse, so a dataclass made in code is held to it too; ``extra`` is kept in the metadata for the caller."""
    meta = {
        "help": help,
        "choices": None if choices is None else list(choices),
        "metavar": metavar,
        "minimum": minimum,
        **extra,
    }
    return dataclasses.field(default=default, metadata={KEY: meta})


def settings(field: dataclasses.Field) -> dict[str, Any]:
    """The option settings of ``field``; empty when it is not a command-line option."""
    return field.metadata.get(KEY, {})


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _options(cls: type) -> Iterator[tuple[dataclasses.Field, Any]]:
    """(field, value type) of every option of the dataclass ``cls``: ``int`` for ``int`` and for ``int | None``."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if not settings(field):
            continue
        kind = hints[field.name]
        if typing.get_origin(kind) in (typing.Union, types.UnionType):
            kinds = [k for k in typing.get_args(kind) if k is not type(None)]
            kind = kinds[0] if len(kinds) == 1 else kind
        if typing.get_origin(kind) is not None or not callable(kind):
            raise TypeError(f"{cls.__name__}.{field.name} is of type {kind}: an option takes one plain type")
        yield field, kind


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add every option of the dataclass ``cls`` to ``parser``, in the order of its fields."""
    for field, kind in _options(cls):
        meta, required = settings(field), field.default is dataclasses.MISSING
        if kind is bool:
            if required:
                raise TypeError(f"{cls.__name__}.{field.name}: a switch needs a default")
            parser.add_argument(
                flag(f"no_{field.name}" if field.default else field.name),
                dest=field.name,
                default=field.default,
                action="store_false" if field.default else "store_true",
                help=meta["help"],
            )
        else:
            parser.add_argument(
                flag(field.name),
                type=kind,
                default=None if required else field.default,
                required=required,
                choices=meta["choices"],
                metavar=meta["metavar"],
                help=meta["help"],
            )


def from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """The dataclass ``cls`` of the ``args`` a parser with its options parsed; ``given`` values (of fields that are
    not options, or overriding options) are passed as they are."""
    values = {field.name: getattr(args, field.name) for field, _ in _options(cls) if field.name not in given}
    return cls(**values, **given)


def check_minimums(obj: Any) -> None:
    """ValueError naming the option of the first value below its ``minimum`` (None, "not given", passes)."""
    for field, _ in _options(type(obj)):
        value, minimum = getattr(obj, field.name), settings(field)["minimum"]
        if minimum is not None and value is not None and value < minimum:
            raise ValueError(f"{flag(field.name)} must be >= {minimum}, got {value}")

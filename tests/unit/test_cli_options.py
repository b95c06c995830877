"""retool.cli_options: one dataclass declaration gives the argparse options and the dataclass of what was parsed."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from retool.cli_options import add_options, check_minimums, from_args, option


@dataclasses.dataclass(frozen=True)
class Sample:
    out: Path = option(help="where to write")
    rows: int = option(8, help="rows (default: %(default)s)", minimum=1)
    rate: float = option(0.5, help="a fraction")
    limit: int | None = option(None, help="at most this many (default: all)", minimum=0)
    mode: str = option("fast", choices=("fast", "slow"), help="how")
    shipped: bool = option(True, help="turn the shipped copy off")
    force: bool = option(False, help="redo everything")
    note: str = "not an option"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sample")
    add_options(p, Sample)
    return p


def test_defaults_types_and_the_dataclass_of_the_parsed_options():
    parsed = from_args(Sample, parser().parse_args(["--out", "x"]))
    assert parsed == Sample(out=Path("x"))
    given = from_args(
        Sample,
        parser().parse_args(
            ["--out", "x", "--rows", "3", "--rate", "0.25", "--limit", "0", "--mode", "slow", "--no-shipped", "--force"]
        ),
    )
    assert given == Sample(out=Path("x"), rows=3, rate=0.25, limit=0, mode="slow", shipped=False, force=True)
    assert isinstance(given.out, Path) and isinstance(given.rows, int) and isinstance(given.rate, float)


def test_the_parser_holds_each_declaration():
    actions = {a.dest: a for a in parser()._actions}
    assert actions["out"].required and actions["out"].option_strings == ["--out"]
    assert (actions["rows"].type, actions["rows"].default, actions["rows"].help) == (
        int,
        8,
        "rows (default: %(default)s)",
    )
    assert actions["limit"].type is int and actions["limit"].default is None and not actions["limit"].required
    assert actions["mode"].choices == ["fast", "slow"]
    assert actions["shipped"].option_strings == ["--no-shipped"] and actions["shipped"].default is True
    assert actions["force"].option_strings == ["--force"] and actions["force"].default is False
    assert "note" not in actions  # a plain field is no option
    assert "rows (default: 8)" in parser().format_help()


def test_bad_command_lines_are_refused_by_argparse(capsys):
    for argv in ([], ["--out", "x", "--rows", "many"], ["--out", "x", "--mode", "medium"]):
        with pytest.raises(SystemExit):
            parser().parse_args(argv)
    assert "--mode" in capsys.readouterr().err


def test_given_values_win_and_fill_fields_that_are_not_options():
    parsed = from_args(Sample, parser().parse_args(["--out", "x", "--rows", "3"]), rows=5, note="given")
    assert (parsed.rows, parsed.note) == (5, "given")


def test_minimums_name_the_option_and_let_not_given_pass():
    check_minimums(Sample(out=Path("x"), limit=None))
    check_minimums(Sample(out=Path("x"), rows=1, limit=0))
    with pytest.raises(ValueError, match=r"--rows must be >= 1, got 0"):
        check_minimums(Sample(out=Path("x"), rows=0))
    with pytest.raises(ValueError, match=r"--limit must be >= 0, got -1"):
        check_minimums(Sample(out=Path("x"), limit=-1))


def test_an_option_of_no_plain_type_or_a_switch_without_default_is_refused():
    @dataclasses.dataclass
    class Listed:
        names: list[str] = option(dataclasses.MISSING, help="names")

    @dataclasses.dataclass
    class Switch:
        on: bool = option(help="on")

    for cls in (Listed, Switch):
        with pytest.raises(TypeError, match=cls.__name__):
            add_options(argparse.ArgumentParser(), cls)

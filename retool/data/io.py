"""Reading raw rows from a Hugging Face hub id, a parquet / jsonl / json file or a dataset directory, and writing
parquet files atomically.

`open_rows(source, split=None)` resolves the source at once (so a missing path or an unreachable hub fails before
any work) and returns a `RowSource` that streams plain-Python dict rows; parquet files are read in record batches so
a 300 MB DAPO file never has to be held as Python objects.

A hub id (`owner/name` that is not an existing path) is loaded with `datasets.load_dataset`; when the hub cannot be
reached the error says how to download the data and pass the local copy instead.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SUFFIXES = (".parquet", ".jsonl", ".json")
# Metadata files that hub snapshots and save_to_disk directories carry next to the data.
_METADATA_FILES = {"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_BATCH_ROWS = 2048


class DataSourceError(ValueError):
    """An input cannot be found or read, or an output cannot be written; the message says what to do."""


class ConversionError(ValueError):
    """One raw row cannot be converted. `kind` is a short category for counting; str(error) is the reason."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


@dataclass
class RowSource:
    """Rows of one input. `description` names it in reports; `columns` are the column names of its first file."""

    description: str
    columns: list[str]
    _iterate: Callable[[], Iterator[dict[str, Any]]]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._iterate()


def looks_like_hub_id(source: str) -> bool:
    """True for `owner/name` strings that are not local paths (a missing `x/y.parquet` is a missing file)."""
    return bool(_HUB_ID.match(source)) and not os.path.exists(source) and not source.endswith(DATA_SUFFIXES)


def open_rows(source: str | os.PathLike, split: str | None = None) -> RowSource:
    """Resolve `source` (hub id, data file, or directory) into a RowSource; `split` picks a split or data files."""
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_file():
        return _file_source(path)
    if path.is_dir():
        return _dir_source(path, split)
    if looks_like_hub_id(text):
        return _hub_source(text, split)
    raise DataSourceError(f"input {text!r} does not exist (expected a hub id owner/name, a data file or a directory)")


def _file_source(path: Path) -> RowSource:
    if path.suffix == ".parquet":
        try:
            columns = pq.read_schema(path).names
        except (OSError, pa.ArrowException) as exc:
            raise DataSourceError(f"{path}: not a readable parquet file ({exc})") from exc
        return RowSource(str(path), columns, lambda: _iter_parquet(path))
    if path.suffix in (".jsonl", ".json"):
        first = next(_iter_json(path), None)
        return RowSource(str(path), list(first) if first else [], lambda: _iter_json(path))
    raise DataSourceError(f"{path}: unsupported file type {path.suffix!r}; use one of {', '.join(DATA_SUFFIXES)}")


def _iter_parquet(path: Path) -> Iterator[dict[str, Any]]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS):
        yield from batch.to_pylist()


def _iter_json(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSON-lines file, or of a .json file holding one array of objects."""
    with path.open(encoding="utf-8") as handle:
        head = handle.read(1 << 16).lstrip()
    if path.suffix == ".json" and head.startswith("["):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataSourceError(f"{path}: invalid JSON ({exc})") from exc
        for number, row in enumerate(rows):
            if not isinstance(row, dict):
                raise DataSourceError(f"{path}: element {number} is a {type(row).__name__}, expected an object")
            yield row
        return
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataSourceError(f"{path}:{line_number}: invalid JSON line ({exc})") from exc
            if not isinstance(row, dict):
                raise DataSourceError(f"{path}:{line_number}: a JSON {type(row).__name__}, expected an object")
            yield row


def _dir_source(path: Path, split: str | None) -> RowSource:
    # A directory written by datasets' save_to_disk (a Dataset or a DatasetDict).
    if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
        return _datasets_source(_load_from_disk(path), str(path), split)
    files = data_files(path, split)
    if not files:
        wanted = f" whose path contains {split!r}" if split else ""
        raise DataSourceError(f"{path}: no {'/'.join(DATA_SUFFIXES)} data files{wanted} found in this directory")
    sources = [_file_source(p) for p in files]
    description = f"{path} ({', '.join(str(p.relative_to(path)) for p in files)})"

    def iterate() -> Iterator[dict[str, Any]]:
        for one in sources:
            yield from one

    return RowSource(description, sources[0].columns, iterate)


def data_files(path: Path, split: str | None = None) -> list[Path]:
    """The data files of a dataset directory (a hub snapshot): every parquet / jsonl / json file below it except
    metadata and hidden folders (a snapshot's .cache/), sorted; with ``split``, those whose path contains it."""
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and p.suffix in DATA_SUFFIXES
        and p.name not in _METADATA_FILES
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    return files if split is None else [p for p in files if split in p.relative_to(path).as_posix()]


def _load_from_disk(path: Path):
    datasets = _import_datasets()
    try:
        return datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises several unrelated types for a damaged directory
        raise DataSourceError(
            f"{path}: cannot be read with datasets.load_from_disk ({type(exc).__name__}: {exc})"
        ) from exc


def _hub_source(hub_id: str, split: str | None) -> RowSource:
    datasets = _import_datasets()
    try:
        loaded = datasets.load_dataset(hub_id)
    except Exception as exc:  # offline hosts fail with ConnectionError, OSError or hub-specific errors
        raise DataSourceError(
            f"could not load the hub dataset {hub_id!r} ({type(exc).__name__}: {exc}). `retool-data download` "
            f"fetches the recipe's data sets into data/raw/ (--source modelscope, or HF_ENDPOINT=<mirror>); or "
            f"download it where the hub is reachable (e.g. `hf download {hub_id} --repo-type dataset --local-dir "
            f"./{hub_id.split('/')[-1]}`), copy it here and pass the local directory or data file as --input."
        ) from exc
    return _datasets_source(loaded, f"hub:{hub_id}", split)


def _datasets_source(loaded: Any, description: str, split: str | None) -> RowSource:
    """Pick one split of a DatasetDict (or take a Dataset as is)."""
    if hasattr(loaded, "column_names") and not isinstance(loaded.column_names, dict):
        dataset = loaded
    else:
        splits = list(loaded.keys())
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in splits:
            raise DataSourceError(f"{description} has splits {splits}; choose one with --split")
        dataset = loaded[split]
        description = f"{description} (split {split})"
    return RowSource(description, list(dataset.column_names), lambda: iter(dataset))


def _import_datasets():
    try:
        import datasets
    except ImportError as exc:
        raise DataSourceError(
            "loading a hub id or a save_to_disk directory needs the `datasets` package (pip install datasets); "
            "a local parquet or jsonl file does not"
        ) from exc
    return datasets


def write_parquet(rows: Iterable[dict[str, Any]], output: str | os.PathLike, schema: pa.Schema | None = None) -> int:
    """Write dict rows to `output` (parent directories created) through a temporary file renamed at the end, so a
    failure never leaves a partial file. With `schema` the columns are typed exactly; without, pyarrow infers them.
    Returns the number of rows written."""
    output = Path(output)
    if output.suffix != ".parquet":
        raise DataSourceError(f"output {output} must be a .parquet file")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    written = 0
    writer: pq.ParquetWriter | None = None
    try:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= _BATCH_ROWS:
                writer = _write_batch(writer, tmp, batch, schema)
                written += len(batch)
                batch = []
        if batch or writer is None:
            writer = _write_batch(writer, tmp, batch, schema)
            written += len(batch)
        writer.close()
        writer = None
        tmp.replace(output)
    finally:
        if writer is not None:
            writer.close()
        if tmp.exists():
            tmp.unlink()
    return written


def _write_batch(writer: pq.ParquetWriter | None, tmp: Path, batch: list[dict[str, Any]], schema: pa.Schema | None):
    if schema is None and writer is not None:
        schema = writer.schema
    if schema is None and not batch:
        raise DataSourceError("refusing to write an empty parquet file without a schema")
    table = pa.Table.from_pylist(batch, schema=schema)
    if writer is None:
        writer = pq.ParquetWriter(tmp, table.schema)
    writer.write_table(table)
    return writer


def add_conversion_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both converters share: error policy, split selection, JSON report."""
    parser.add_argument(
        "--on-error",
        choices=("skip", "fail"),
        default="skip",
        help="skip unconvertible rows (reported) or stop at the first one (default: %(default)s)",
    )
    parser.add_argument("--split", default=None, help="split of a multi-split dataset, or a data-file name filter")
    parser.add_argument("--report", type=Path, default=None, help="also write the full summary as JSON to this file")


def skipped_rows_lines(summary: dict[str, Any], max_rows: int) -> list[str]:
    """Report lines for the skipped rows of a converter summary: reasons, then the first `max_rows` rows."""
    if not summary["skipped"]:
        return []
    lines = [f"skip reasons: {summary['skip_reasons']}"]
    lines += [f"  row {item['row']}: [{item['kind']}] {item['reason']}" for item in summary["skipped_rows"][:max_rows]]
    if summary["skipped"] > max_rows:
        lines.append(f"  ... {summary['skipped'] - max_rows} more (write them all with --report FILE)")
    return lines


def run_conversion(
    prog: str,
    convert: Callable[[], dict[str, Any]],
    describe: Callable[[dict[str, Any]], str],
    report: Path | None,
    input_errors: tuple[type[Exception], ...],
) -> int:
    """Run a converter for a CLI: print its summary (and save it as JSON), or one error line.

    Exit codes: 0 done, 1 a row could not be converted under --on-error fail, 2 the input itself is unusable.
    """
    try:
        summary = convert()
    except (ConversionError, *input_errors) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, ConversionError) else 2
    print(describe(summary))
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0

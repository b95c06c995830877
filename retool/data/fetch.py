"""Download the reference run's three data sets and its model to local folders, and check them
(``retool-data download``).

Each asset comes from the Hugging Face hub (default; ``HF_ENDPOINT`` or ``--endpoint`` selects a mirror such as
https://hf-mirror.com) or from ModelScope (``--source modelscope``, for hosts in China; needs ``pip install
modelscope``; ``MODELSCOPE_DOMAIN`` selects its site):

| asset | Hugging Face | ModelScope | check |
|---|---|---|---|
| retool_sft | JoeYing/ReTool-SFT | AI-ModelScope/ReTool-SFT | 2,000 rows |
| dapo_math_17k | BytedTsinghua-SIA/DAPO-Math-17k | BytedTsinghua-SIA/DAPO-Math-17k | 1,791,700 rows |
| aime_2025 | yentinglin/aime_2025 | none: the recipe's copy (retool/datasets/aime2025, same 30 problems) | 30 rows |
| model | Qwen/Qwen3-4B-Instruct-2507 | Qwen/Qwen3-4B-Instruct-2507 | config, tokenizer, every weight shard |

DAPO-Math-17k holds each of its 17,917 problems 100 times; the reference trained on it as downloaded.
``--repo NAME=ID`` replaces an id (e.g. another ModelScope copy). Folders: ``<out>/ReTool-SFT``,
``<out>/DAPO-Math-17k``, ``<out>/aime_2025`` and ``<models>/Qwen3-4B-Instruct-2507``; ``retool-data prepare`` reads
the first three.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from retool.data.io import data_files
from retool.datasets import dataset_path

SOURCES = ("hf", "modelscope")
BUNDLED = "bundled"  # a ModelScope id of None: the recipe ships the set itself


class DownloadError(RuntimeError):
    """A download or a check failed; the message says which asset, where, and what to do."""


@dataclass(frozen=True)
class Asset:
    name: str
    hf_id: str
    modelscope_id: str | None  # None: no ModelScope copy; the bundled file is used
    kind: str  # "dataset" | "model"
    folder: str
    rows: int | None  # the expected row count of a data set; None for the model

    def repo(self, source: str, overrides: dict[str, str]) -> str:
        """The id to download from ``source``; BUNDLED when the recipe's own copy stands in."""
        if self.name in overrides:
            return overrides[self.name]
        return self.hf_id if source == "hf" else (self.modelscope_id or BUNDLED)


ASSETS = {
    asset.name: asset
    for asset in (
        Asset("retool_sft", "JoeYing/ReTool-SFT", "AI-ModelScope/ReTool-SFT", "dataset", "ReTool-SFT", 2_000),
        Asset(
            "dapo_math_17k",
            "BytedTsinghua-SIA/DAPO-Math-17k",
            "BytedTsinghua-SIA/DAPO-Math-17k",
            "dataset",
            "DAPO-Math-17k",
            1_791_700,
        ),
        Asset("aime_2025", "yentinglin/aime_2025", None, "dataset", "aime_2025", 30),
        Asset(
            "model",
            "Qwen/Qwen3-4B-Instruct-2507",
            "Qwen/Qwen3-4B-Instruct-2507",
            "model",
            "Qwen3-4B-Instruct-2507",
            None,
        ),
    )
}


def asset_dir(asset: Asset, out: Path, models: Path) -> Path:
    return (models if asset.kind == "model" else out) / asset.folder


def hub_endpoint(explicit: str | None = None) -> str | None:
    """The Hugging Face endpoint to use: ``explicit``, else ``HF_ENDPOINT`` (a mirror), else None (the hub)."""
    return explicit or os.environ.get("HF_ENDPOINT") or None


def download_call(
    asset: Asset, source: str, dest: Path, endpoint: str | None = None, overrides: dict[str, str] | None = None
) -> tuple[str, dict]:
    """(function, keyword arguments) of the download of ``asset`` into ``dest``: ``huggingface_hub.snapshot_download``,
    ``modelscope.snapshot_download`` / ``modelscope.dataset_snapshot_download``, or ``copy`` of the bundled file."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    repo = asset.repo(source, overrides or {})
    if repo == BUNDLED:
        return "copy", {"src": dataset_path("aime2025"), "dst": dest / "test.jsonl"}
    if source == "hf":
        kwargs = {"repo_id": repo, "repo_type": asset.kind, "local_dir": str(dest)}
        endpoint = hub_endpoint(endpoint)
        if endpoint:
            kwargs["endpoint"] = endpoint
        return "huggingface_hub.snapshot_download", kwargs
    if asset.kind == "model":
        return "modelscope.snapshot_download", {"model_id": repo, "local_dir": str(dest)}
    return "modelscope.dataset_snapshot_download", {"dataset_id": repo, "local_dir": str(dest)}


def download(
    asset: Asset, source: str, dest: Path, endpoint: str | None = None, overrides: dict[str, str] | None = None
) -> None:
    """Download ``asset`` into ``dest`` (resumes: files already there are kept). DownloadError says what to do."""
    function, kwargs = download_call(asset, source, dest, endpoint, overrides)
    dest.mkdir(parents=True, exist_ok=True)
    if function == "copy":
        shutil.copyfile(kwargs["src"], kwargs["dst"])
        return
    if function.startswith("modelscope."):
        snapshot = getattr(_import_modelscope(), function.split(".", 1)[1])
    else:
        from huggingface_hub import snapshot_download as snapshot
    where = kwargs.get("endpoint", "https://huggingface.co") if source == "hf" else "ModelScope"
    repo = kwargs.get("repo_id") or kwargs.get("model_id") or kwargs.get("dataset_id")
    try:
        snapshot(**kwargs)
    except Exception as exc:  # network, auth and missing-repo errors differ per library and version
        other = (
            "set HF_ENDPOINT=https://hf-mirror.com (a mirror) or use --source modelscope"
            if source == "hf"
            else "use --source hf (HF_ENDPOINT=https://hf-mirror.com for a mirror)"
        )
        raise DownloadError(
            f"{asset.name}: could not download {repo} from {where} ({type(exc).__name__}: {str(exc)[:300]}). If "
            f"this host cannot reach it: {other}, or download the folder on a host that can, copy it to {dest} and "
            f"run `retool-data download --check-only`."
        ) from exc


def _import_modelscope():
    try:
        import modelscope
    except ImportError as exc:
        raise DownloadError(
            "--source modelscope needs the modelscope package: pip install modelscope (in the NPU image: bash "
            "scripts/install_npu.sh --no-requirements --no-verl modelscope), or use --source hf (HF_ENDPOINT="
            "https://hf-mirror.com for a mirror)"
        ) from exc
    return modelscope


# ---------------------------------------------------------------- checks


def count_rows(folder: Path) -> tuple[int, list[Path]]:
    """Rows of every data file below ``folder`` (the files ``retool-data prepare`` reads), from parquet metadata or
    line counts, so 1.8M rows take no time; and the files counted."""
    files = data_files(folder)
    total = 0
    for path in files:
        if path.suffix == ".parquet":
            total += pq.ParquetFile(path).metadata.num_rows
            continue
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json" and text.lstrip().startswith("["):  # one array of rows, else JSON lines
            total += len(json.loads(text))
        else:
            total += sum(1 for line in text.splitlines() if line.strip())
    return total, files


def check(asset: Asset, folder: Path) -> str:
    """A one-line summary of a good ``folder``; DownloadError naming what is wrong otherwise."""
    if not folder.is_dir():
        raise DownloadError(f"{asset.name}: {folder} does not exist (retool-data download --only {asset.name})")
    if asset.kind == "model":
        missing = model_missing_files(folder)
        if missing:
            raise DownloadError(
                f"{asset.name}: {folder} lacks {', '.join(missing)}; download it again (files already there are kept)"
            )
        return f"{asset.name:14} {folder}  model files complete"
    rows, files = count_rows(folder)
    if not files:
        raise DownloadError(f"{asset.name}: no parquet/jsonl/json data files in {folder}; download it again")
    if rows != asset.rows:
        listed = ", ".join(str(p.relative_to(folder)) for p in files)
        raise DownloadError(
            f"{asset.name}: {folder} holds {rows:,} rows ({listed}), expected {asset.rows:,}. An interrupted download "
            f"or another copy of the set; download it again into an empty folder"
        )
    return f"{asset.name:14} {folder}  {rows:,} rows"


def model_missing_files(folder: Path) -> list[str]:
    """The files a Hugging Face checkpoint folder needs but lacks: config, tokenizer, weights (every shard the
    index names)."""
    missing = [name for name in ("config.json", "tokenizer_config.json") if not (folder / name).is_file()]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing += [shard for shard in shards if not (folder / shard).is_file()]
    elif not (folder / "model.safetensors").is_file():
        missing.append("model.safetensors (or model.safetensors.index.json and its shards)")
    return missing

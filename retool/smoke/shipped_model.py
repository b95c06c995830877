"""The smoke's pre-trained tiny model, kept in the repository (``assets/smoke_model/``) so that a clean clone does not
pay for the pre-training (about 9 minutes on 2 cores; ``asset.json`` records the measured seconds and the host).

``retool.smoke.build`` installs it instead of pre-training when it was made from the same inputs: the model options,
the data options (the AIME file by its SHA-256, not its path) and, byte for byte, the tokenizer trimmed to the data
just built. Anything else is pre-trained on the spot, as before. After changing the task, the tokenizer or the
pre-training, refresh it with the smoke's own build options plus ``--ship-model``::

    python -m retool.smoke.build --out .cache/smoke-assets --aime-rows 8 --rl-val-rows 64 --profile improved \\
        --force --no-shipped-model --ship-model

(tests/unit/test_shipped_model.py fails while the shipped asset no longer fits the smoke's options.)
"""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from retool.constants import REPO_ROOT

SHIPPED_DIR = REPO_ROOT / "assets" / "smoke_model"
RECORD = "asset.json"
FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def key(model_inputs: dict[str, Any], data_inputs: dict[str, Any]) -> dict[str, Any]:
    """What the model depends on, free of local paths."""
    data = {**data_inputs, "aime2025": sha256(Path(data_inputs["aime2025"]))}
    return {"model": {k: v for k, v in model_inputs.items() if k != "shipped_model"}, "data": data}


def read_record(shipped: Path = SHIPPED_DIR) -> dict[str, Any] | None:
    path = shipped / RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc}): restore it with git or refresh the asset "
            "(retool/smoke/shipped_model.py says how)"
        ) from None


def find(wanted_key: dict[str, Any], tokenizer_dir: Path, shipped: Path = SHIPPED_DIR) -> dict[str, Any] | None:
    """The shipped asset's record when it was made from ``wanted_key`` and with the tokenizer just written to
    ``tokenizer_dir``; None when it does not fit (then the caller pre-trains)."""
    record = read_record(shipped)
    if record is None or record.get("key") != wanted_key:
        return None
    if sha256(tokenizer_dir / "tokenizer.json") != record["sha256"]["tokenizer.json"]:
        return None
    for name in FILES:
        if sha256(shipped / name) != record["sha256"][name]:
            raise ValueError(
                f"{shipped / name} does not match the SHA-256 in {shipped / RECORD}: restore it with "
                "git, or refresh the asset (retool/smoke/shipped_model.py says how)"
            )
    return record


def install_if_fits(wanted_key: dict[str, Any], model_dir: Path, shipped: Path = SHIPPED_DIR) -> dict[str, Any] | None:
    """Copy the shipped model into ``model_dir`` (which holds the tokenizer just built) when ``find`` says it fits;
    returns its model summary, marked as shipped, or None."""
    record = find(wanted_key, model_dir, shipped)
    if record is None:
        return None
    for name in FILES:
        shutil.copyfile(shipped / name, model_dir / name)
    summary = {**record["summary"], "shipped": str(shipped)}
    summary["pretrain"] = {**summary["pretrain"], "shipped": str(shipped)}
    return summary


def save(
    model_dir: Path, wanted_key: dict[str, Any], summary: dict[str, Any], command: str, shipped: Path = SHIPPED_DIR
) -> Path:
    """Copy a freshly pre-trained model into the repository with the record ``find`` checks."""
    if not (summary.get("pretrain") and not summary.get("shipped")):
        raise ValueError("only a model pre-trained by this build can be shipped: add --no-shipped-model --force")
    shipped.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(model_dir / name, shipped / name)
    record = {
        "key": wanted_key,
        "sha256": {name: sha256(shipped / name) for name in FILES},
        "summary": {k: v for k, v in summary.items() if k not in ("path", "files")},
        "made_by": f"python -m retool.smoke.build {command}",
        "made_on": datetime.date.today().isoformat(),
    }
    (shipped / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return shipped

"""``retool-data``: ``prepare`` end to end on small files in the real hub layouts, the row-count and model checks, and
the download paths without the hub (the mirror variable reaching a real request, a clear error when the hub is
unreachable or modelscope is missing)."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from retool_data_helpers import dapo_row, two_call_row

from retool.data.cli import main
from retool.data.fetch import ASSETS, DownloadError, check, download, download_call, model_missing_files
from retool.data.prepare import RL_TRAIN_FILE, RL_VAL_FILE, SFT_FILE
from retool.data.prompt import ANSWER_INSTRUCTION, VERL_RETOOL_ANSWER_FORMAT
from retool.tool_yaml import load_tool_schema
from retool.profiles import check_data, get_profile

PROBLEMS = 4
COPIES = 3  # DAPO-Math-17k repeats each problem (100 times in the real set)


def write_parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def aime_rows(count: int = 30) -> list[dict]:
    """yentinglin/aime_2025's layout: id, problem, solution, answer (a string), url, year."""
    return [
        {
            "id": i,
            "problem": f"Find the {i}th value of $x$.",
            "solution": "...",
            "answer": str(100 + i),
            "url": f"https://artofproblemsolving.com/wiki/index.php/2025_AIME_I_Problems/Problem_{i}",
            "year": "2025",
        }
        for i in range(count)
    ]


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    """What `retool-data download` leaves in data/raw: the three hub snapshots in their own file layouts."""
    root = tmp_path / "raw"
    write_parquet(root / "ReTool-SFT" / "data" / "train-00000-of-00001.parquet", [two_call_row()] * 2)
    dapo = [dapo_row(f"What is {p} plus {p}?", str(2 * p), f"uuid-{p}") for _ in range(COPIES) for p in range(PROBLEMS)]
    write_parquet(root / "DAPO-Math-17k" / "data" / "dapo-math-17k.parquet", dapo)
    write_parquet(root / "aime_2025" / "train-00000-of-00001.parquet", aime_rows())
    (root / "aime_2025" / "README.md").write_text("---\nlicense: mit\n---\n")  # a snapshot carries its card
    return root


def rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_prepare_reference_keeps_every_dapo_row_and_the_reference_wording(raw: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "data" / "reference"
    assert main(["prepare", "--profile", "reference", "--raw", str(raw), "--out", str(out)]) == 0
    sft, dapo, aime = rows(out / SFT_FILE), rows(out / RL_TRAIN_FILE), rows(out / RL_VAL_FILE)
    assert len(sft) == 2 and len(dapo) == PROBLEMS * COPIES and len(aime) == 30  # no dedupe, as the reference
    assert all(r["prompt"][0]["content"].endswith(VERL_RETOOL_ANSWER_FORMAT) for r in dapo + aime)
    assert {r["data_source"] for r in aime} == {"aime_2025"} and aime[3]["reward_model"]["ground_truth"] == "103"
    assert sft[0]["tools"][0] == load_tool_schema(get_profile("reference").tool_config_path)
    assert check_data(get_profile("reference"), out / SFT_FILE, (out / RL_TRAIN_FILE, out / RL_VAL_FILE)) == []
    assert check_data(get_profile("improved"), out / SFT_FILE, (out / RL_TRAIN_FILE,)) != []
    assert f"DATA_DIR={out.resolve()}" in capsys.readouterr().out


def test_prepare_improved_dedupes_and_uses_its_own_wording_and_tool(raw: Path, tmp_path: Path) -> None:
    out = tmp_path / "improved"
    assert main(["prepare", "--profile", "improved", "--raw", str(raw), "--out", str(out)]) == 0
    dapo = rows(out / RL_TRAIN_FILE)
    assert len(dapo) == PROBLEMS and len({r["extra_info"]["index"] for r in dapo}) == PROBLEMS
    assert all(r["prompt"][0]["content"].endswith(ANSWER_INSTRUCTION) for r in dapo + rows(out / RL_VAL_FILE))
    improved = get_profile("improved")
    assert rows(out / SFT_FILE)[0]["tools"][0] == load_tool_schema(improved.tool_config_path)
    assert check_data(improved, out / SFT_FILE, (out / RL_TRAIN_FILE, out / RL_VAL_FILE)) == []


def test_prepare_without_the_downloads_says_what_to_do(tmp_path: Path, capsys) -> None:
    assert (
        main(["prepare", "--profile", "reference", "--raw", str(tmp_path / "nothing"), "--out", str(tmp_path / "out")])
        == 2
    )
    err = capsys.readouterr().err
    assert "ReTool-SFT" in err and "does not exist" in err and "retool-data download" in err
    assert not (tmp_path / "out" / SFT_FILE).exists()


def test_row_counts_are_checked(raw: Path, capsys) -> None:
    assert check(ASSETS["aime_2025"], raw / "aime_2025").endswith("30 rows")
    write_parquet(raw / "aime_2025" / "train-00000-of-00001.parquet", aime_rows(29))
    with pytest.raises(DownloadError, match=r"holds 29 rows \(train-00000-of-00001.parquet\), expected 30"):
        check(ASSETS["aime_2025"], raw / "aime_2025")
    assert main(["download", "--check-only", "--out", str(raw), "--only", "aime_2025", "retool_sft"]) == 1
    err = capsys.readouterr().err
    assert "aime_2025" in err and "expected 30" in err
    assert "retool_sft" in err and "holds 2 rows" in err and "expected 2,000" in err


def test_a_complete_set_passes_the_check(tmp_path: Path) -> None:
    write_parquet(tmp_path / "ReTool-SFT" / "data" / "train-00000-of-00001.parquet", [two_call_row()] * 2000)
    assert check(ASSETS["retool_sft"], tmp_path / "ReTool-SFT").endswith("2,000 rows")


def test_model_files_are_checked_shard_by_shard(tmp_path: Path) -> None:
    model = tmp_path / "Qwen3-4B-Instruct-2507"
    model.mkdir()
    for name in ("config.json", "tokenizer_config.json", "model-00001-of-00002.safetensors"):
        (model / name).write_text("{}")
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert model_missing_files(model) == ["model-00002-of-00002.safetensors"]
    with pytest.raises(DownloadError, match="lacks model-00002-of-00002.safetensors"):
        check(ASSETS["model"], model)
    (model / "model-00002-of-00002.safetensors").write_text("{}")
    assert check(ASSETS["model"], model).endswith("model files complete")


def test_the_mirror_variable_reaches_the_download_call(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.com")
    function, kwargs = download_call(ASSETS["dapo_math_17k"], "hf", tmp_path / "DAPO-Math-17k")
    assert function == "huggingface_hub.snapshot_download"
    assert kwargs == {
        "repo_id": "BytedTsinghua-SIA/DAPO-Math-17k",
        "repo_type": "dataset",
        "local_dir": str(tmp_path / "DAPO-Math-17k"),
        "endpoint": "https://hf-mirror.com",
    }
    _, model_kwargs = download_call(ASSETS["model"], "hf", tmp_path / "m", endpoint="https://example.org")
    assert model_kwargs["endpoint"] == "https://example.org" and model_kwargs["repo_type"] == "model"
    monkeypatch.delenv("HF_ENDPOINT")
    assert "endpoint" not in download_call(ASSETS["model"], "hf", tmp_path / "m")[1]


def test_modelscope_ids_and_the_bundled_aime_copy(tmp_path: Path) -> None:
    assert download_call(ASSETS["retool_sft"], "modelscope", tmp_path / "s") == (
        "modelscope.dataset_snapshot_download",
        {"dataset_id": "AI-ModelScope/ReTool-SFT", "local_dir": str(tmp_path / "s")},
    )
    assert download_call(ASSETS["model"], "modelscope", tmp_path / "m")[1]["model_id"] == "Qwen/Qwen3-4B-Instruct-2507"
    assert (
        download_call(ASSETS["aime_2025"], "modelscope", tmp_path / "a", overrides={"aime_2025": "TIGER-Lab/AIME25"})[
            1
        ]["dataset_id"]
        == "TIGER-Lab/AIME25"
    )
    download(ASSETS["aime_2025"], "modelscope", tmp_path / "aime_2025")  # no ModelScope copy: the shipped one
    assert check(ASSETS["aime_2025"], tmp_path / "aime_2025").endswith("30 rows")


class _Recorder(http.server.BaseHTTPRequestHandler):
    paths: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.paths.append(self.path)
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "Repository not found"}')

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


def test_a_mirror_in_hf_endpoint_gets_the_request(monkeypatch, tmp_path: Path) -> None:
    mirror = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=mirror.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{mirror.server_port}")
        with pytest.raises(DownloadError, match=rf"yentinglin/aime_2025 from http://127.0.0.1:{mirror.server_port}"):
            download(ASSETS["aime_2025"], "hf", tmp_path / "aime_2025")
    finally:
        mirror.shutdown()
    assert any("yentinglin/aime_2025" in path for path in _Recorder.paths), _Recorder.paths


def test_an_unreachable_hub_gives_a_clear_error(tmp_path: Path, capsys) -> None:
    closed = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    port = closed.server_port
    closed.server_close()  # nothing listens there any more
    code = main(["download", "--only", "retool_sft", "--out", str(tmp_path), "--endpoint", f"http://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"could not download JoeYing/ReTool-SFT from http://127.0.0.1:{port}" in err
    assert "HF_ENDPOINT=https://hf-mirror.com" in err and "--source modelscope" in err and "--check-only" in err


def test_modelscope_missing_says_how_to_install_it(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "modelscope", None)  # an import of it now fails, installed or not
    with pytest.raises(DownloadError, match="pip install modelscope"):
        download(ASSETS["model"], "modelscope", tmp_path / "m")

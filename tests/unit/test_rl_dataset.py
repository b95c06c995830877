"""retool.rl_dataset: verl's overlong-prompt filter run once per distinct prompt keeps exactly the rows verl's own
filter over every row keeps, in their order; data it cannot group safely goes through verl's filter as it is."""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from retool.constants import REPO_ROOT

pytestmark = pytest.mark.verl

SHORT_A, SHORT_B = "What is 2 + 2?", "Name the least prime above 10."
LONG = "Count the primes below 1000. " * 40  # far over max_prompt_length


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(REPO_ROOT / "assets" / "smoke_model"))  # small vocabulary: fast to hash


def write_rows(path, prompts):
    """One row per prompt (a list of messages), its position as the index."""
    rows = [{"prompt": prompt, "extra_info": {"index": str(number)}} for number, prompt in enumerate(prompts)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def user(text):
    return [{"role": "user", "content": text}]


def build(cls, path, tokenizer, cache):
    config = OmegaConf.create(
        {
            "max_prompt_length": 64,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(cache),
        }
    )
    return cls(data_files=path, tokenizer=tokenizer, config=config)


def kept_indices(dataset):
    return [row["index"] for row in dataset.dataframe["extra_info"]]


@pytest.fixture()
def datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    return tmp_path


def test_the_distinct_prompt_filter_keeps_verl_s_rows_and_templates_each_prompt_once(datasets_cache, tokenizer, capsys):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from retool.rl_dataset import DistinctPromptFilterDataset

    # a long prompt between repeats of two short ones; a two-message prompt that shares its first message
    prompts = [
        user(SHORT_A),
        user(LONG),
        user(SHORT_B),
        user(SHORT_A),
        user(LONG),
        user(SHORT_B),
        user(SHORT_A),
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": SHORT_A}],
    ]
    path = write_rows(datasets_cache / "rows.parquet", prompts)
    verl_rows = kept_indices(build(RLHFDataset, path, tokenizer, datasets_cache / "a"))
    ours = build(DistinctPromptFilterDataset, path, tokenizer, datasets_cache / "b")
    assert verl_rows == ["0", "2", "3", "5", "6", "7"]  # verl dropped the long prompt's rows
    assert kept_indices(ours) == verl_rows
    assert "8 rows hold 4 distinct prompts" in capsys.readouterr().out
    assert ours[0]["raw_prompt"] == user(SHORT_A) and "__retool_prompt_group" not in ours[0]


def test_prompts_it_cannot_group_safely_go_through_verl_s_filter(datasets_cache, tokenizer, capsys):
    from retool.rl_dataset import DistinctPromptFilterDataset

    # an assistant message without text: grouping on text alone could join prompts that differ
    prompts = [user(SHORT_A) + [{"role": "assistant", "content": None}], user(LONG), user(SHORT_A)]
    ours = build(
        DistinctPromptFilterDataset,
        write_rows(datasets_cache / "rows.parquet", prompts),
        tokenizer,
        datasets_cache / "c",
    )
    assert kept_indices(ours) == ["0", "2"] and "distinct prompts" not in capsys.readouterr().out


def test_groups_follow_the_rows_of_a_selection(tmp_path):
    from retool.rl_dataset import prompt_groups

    table = pa.Table.from_pylist([{"prompt": user(text)} for text in ["a", "b", "a", "c", "b", "a"]])
    dataset = datasets.Dataset(table).select([5, 4, 3, 1])  # an indices mapping, as train_max_samples makes
    group_of_row, first_rows = prompt_groups(dataset, "prompt")
    assert list(first_rows) == [0, 1, 2]  # "a", "b", "c" first seen at rows 0, 1, 2 of the selection
    assert group_of_row[0] != group_of_row[1] and group_of_row[1] == group_of_row[3]
    assert prompt_groups(datasets.Dataset(pa.table({"prompt": ["a plain string"]})), "prompt") is None

"""verl's RLHFDataset with its overlong-prompt filter run once per distinct prompt (`data.custom_cls` in
configs/rl.yaml).

DAPO-Math-17k holds each of its 17,917 problems 100 times, and the reference trains on all 1,791,700 rows. verl's
filter (`data.filter_overlong_prompts`) templates and tokenizes every row at every launch and every resume: on a
Kunpeng host that is minutes on paper however many workers it gets, since each worker costs its own start
(bench/overlong_filter.py measures it). A prompt's token count depends only on its messages
(the chat template and the tool schemas are the same for every row), so this class hands verl's own filter one row
per distinct prompt and then keeps every row whose prompt it kept: the rows verl's filter keeps, in their order, for
about 1/100 of the work on DAPO. Training still draws from every row.

Rows are grouped by the role and text of each message of their prompt. Data where more than that decides the length
(image, video or audio columns, a multimodal processor), a prompt column of another shape, or a message without
text goes through verl's filter as it is.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from verl.utils.dataset.rl_dataset import RLHFDataset

GROUP_COLUMN = "__retool_prompt_group"  # added to the distinct rows only, to map verl's verdicts back


class DistinctPromptFilterDataset(RLHFDataset):
    """RLHFDataset whose overlong-prompt filter templates each distinct prompt once (module docstring)."""

    def maybe_filter_out_long_prompts(self, dataframe=None):
        groups = None
        if (
            self.filter_overlong_prompts
            and self.processor is None
            and not ({self.image_key, self.video_key, self.audio_key} & set(dataframe.column_names))
        ):
            groups = prompt_groups(dataframe, self.prompt_key)
        if groups is None:
            return super().maybe_filter_out_long_prompts(dataframe)
        group_of_row, first_rows = groups
        distinct = dataframe.select(first_rows).add_column(GROUP_COLUMN, group_of_row[first_rows])
        print(f"overlong-prompt filter: {len(dataframe)} rows hold {len(distinct)} distinct prompts")
        kept = super().maybe_filter_out_long_prompts(distinct)
        if len(kept) == len(distinct):
            return dataframe
        keep = np.isin(group_of_row, np.asarray(kept.with_format("arrow")[GROUP_COLUMN]))
        dataframe = dataframe.select(np.flatnonzero(keep))
        print(f"filter dataset len: {len(dataframe)} (all rows of the kept prompts)")
        return dataframe


def prompt_groups(dataframe, prompt_key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(group number of every row, the first row of each group in row order) for rows grouped by their prompt
    messages, or None when the prompt column is not a list of messages with text `role` and `content`, or some
    message has no text (grouping could then join prompts that differ)."""
    column = dataframe.select_columns([prompt_key]).with_format("arrow")[:].column(prompt_key)
    if not _is_text_messages(column.type):
        return None
    keys = pa.chunked_array([_chunk_keys(chunk) for chunk in column.chunks], type=pa.large_string())
    if keys.null_count:
        return None
    group_of_row = pc.index_in(keys, value_set=pc.unique(keys)).to_numpy()
    _, first_rows = np.unique(group_of_row, return_index=True)
    return group_of_row, np.sort(first_rows)


def _is_text_messages(kind: pa.DataType) -> bool:
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(kind.value_type):
        return False
    fields = {field.name: field.type for field in kind.value_type}
    return all(
        name in fields and (pa.types.is_string(fields[name]) or pa.types.is_large_string(fields[name]))
        for name in ("role", "content")
    )


def _chunk_keys(chunk: pa.Array) -> pa.Array:
    """One string per prompt: role and text of each message, joined with separators that text does not hold."""
    messages = chunk.flatten()  # the chunk's own messages, slice offsets accounted for
    texts = pc.binary_join_element_wise(
        pc.struct_field(messages, "role").cast(pa.large_string()),
        pc.struct_field(messages, "content").cast(pa.large_string()),
        pa.scalar("\x1f", pa.large_string()),
    )
    offsets = pc.subtract(chunk.offsets, chunk.offsets[0])
    lists = pa.LargeListArray.from_arrays(offsets.cast(pa.int64()), texts, mask=chunk.is_null())
    return pc.binary_join(lists, pa.scalar("\x1e", pa.large_string()))

#!/usr/bin/env python3
"""Convert JoeYing/ReTool-SFT (hub id, local parquet/jsonl, or dataset directory) into verl multi-turn SFT parquet.

Thin launcher over `retool.data.sft.main` (same as the `retool-sft-preprocess` console script). Run bare, as the
reference's script was, it reads data/raw/ReTool-SFT (where `retool-data download` puts it; else the hub id) and
writes data/reference/retool_sft.parquet, where the SFT launcher reads it:
    python3 retool_sft_preprocess.py
    python3 retool_sft_preprocess.py --input ./ReTool-SFT --output data/reference/retool_sft.parquet
The user turn keeps the reference run's wording by default (`--prompt-style verl_retool`); `--prompt-style
qwen_boxed` gives the improved profile's wording instead, and `--profile improved` its wording and tool schema
together (docs/reference.md, "Prompts"). `retool-data prepare --profile ...` converts all three data sets at once.
"""

from retool.data.sft import main

if __name__ == "__main__":
    raise SystemExit(main())

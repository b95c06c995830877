#!/usr/bin/env python3
"""Convert JoeYing/ReTool-SFT (hub id, local parquet/jsonl, or dataset directory) into verl multi-turn SFT parquet.

Thin launcher over `retool.data.sft.main` (same as the `retool-sft-preprocess` console script), e.g.
    python retool_sft_preprocess.py --input ./ReTool-SFT --output data/retool_sft.parquet \
        --tool-config configs/tool.yaml
The user turn keeps the reference run's text by default (`--prompt-style reference`); `--prompt-style recipe` gives
the recipe's own wording instead (docs/reference.md, "Prompts").
"""

from retool.data.sft import main

if __name__ == "__main__":
    raise SystemExit(main())

"""Names and figures the whole recipe shares, defined once.

Light on purpose (standard library only): data preparation, the reward, the sandbox and the reports import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The function name the model calls; SFT data, the RL tool schema and the reward's parser all use it.
TOOL_NAME = "code_interpreter"

# The checkout the package lives in (configs/, patches/, launchers). For an editable install (how the recipe is
# installed everywhere: `pip install -e .`) this is the clone; launchers also export it as RETOOL_REPO_DIR.
REPO_ROOT = Path(__file__).resolve().parents[1]

# The published result this recipe reproduces (docs/reference.md): the reference run's AIME 2025 accuracy and turns
# at RL step 0 (after SFT) and after its last step. retool-report draws these beside a run's curves.
PUBLISHED_RESULT: dict[str, Any] = {
    "name": "CANN qwen3_tool_agent: Qwen3-4B-Instruct-2507, 16 Atlas A3 dies, SFT then 130 GRPO steps",
    "steps": 130,
    "metrics": {
        "val-core/aime_2025/acc/mean@30": {"start": 0.29, "end": 0.57},
        "val-aux/num_turns/mean": {"start": 7.0, "end": 5.4},
    },
}

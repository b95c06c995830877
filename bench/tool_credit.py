"""Which way did GRPO push tool use, step by step? The per-step table behind the credit numbers of the learning bench.

retool.learning.tool_credit recomputes verl's GRPO advantage of every training sample from a run's dumps
(``<run>/rollouts/<step>.jsonl``, trainer.rollout_data_dir); this prints it per step for one or more runs: tool share,
accuracy with and without the tool, answers missing, trajectories masked, groups with reward variance (the only ones
with a gradient) and which kind of sample won them, the push on tool use (> 0 favours calling the tool), and right
tool-using answers (copied: the tool's last reply verbatim), and tool-using answers one below the truth (what a tool
replying one too many would have made right). bench/learning_signal.py writes the totals into docs/performance.md.

    python bench/tool_credit.py RUN_DIR [RUN_DIR ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from retool.learning import LearningDataError, tool_credit

COLUMNS = (
    "step",
    "samples",
    "tool_share",
    "acc_tool",
    "acc_no_tool",
    "no_answer",
    "masked",
    "informative/groups",
    "won tool/no_tool/both",
    "push",
    "right_tool (copied)",
    "one_below",
)


def rows(credit: dict[str, Any]) -> list[tuple[str, ...]]:
    def cell(value: Any) -> str:
        return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    out = []
    for step, s in credit["steps"].items():
        out.append(
            (
                str(step),
                str(s["samples"]),
                cell(s["tool_share"]),
                cell(s["acc_tool"]),
                cell(s["acc_no_tool"]),
                cell(s["no_answer"]),
                cell(s["masked"]),
                f"{s['informative_groups']}/{s['groups']}",
                "/".join(str(s["won"][k]) for k in ("tool", "no_tool", "both")),
                f"{s['push']:+.3f}",
                f"{s['right_tool']} ({s['right_tool_copied']})",
                str(s["one_below"]),
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run folders holding rollouts/<step>.jsonl")
    parser.add_argument("--json", type=Path, default=None, help="also write {run: credit} here")
    args = parser.parse_args(argv)
    out = {}
    for run in args.runs:
        try:
            out[str(run)] = credit = tool_credit(run / "rollouts")
        except LearningDataError as exc:
            print(f"error: {run}: {exc}", file=sys.stderr)
            return 1
        table = [COLUMNS, *rows(credit)]
        widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
        print(run)
        print("\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in table))
        t = credit["total"]
        print(
            f"total: {t['informative_groups']}/{t['groups']} groups with reward variance, won by "
            f"tool/no_tool/both {t['won']['tool']}/{t['won']['no_tool']}/{t['won']['both']}, push {t['push']:+.3f}, "
            f"{t['steps_without_gradient']} of {len(credit['steps'])} steps without gradient, right answers with the "
            f"tool {t['right_tool']} ({t['right_tool_copied']} copied), without {t['right_no_tool']}, tool-using "
            f"answers one below the truth {t['one_below']}\n"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

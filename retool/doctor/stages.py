"""The README's path as the doctor sees it: which steps a stage needs done, and what comes next.

The README calls ``retool-doctor`` three times, each before a step that costs time or devices:

- ``--stage install``, right after the install: nothing of the run exists yet (no data, model, SFT model or
  sandbox), so only the stack, the devices, the config and the run's size are judged; what is missing is listed as
  the next steps, not as failures;
- ``--config run_qwen3_4b_sft_npu.sh`` (stage ``sft``): the downloaded model and the prepared data must be there;
- ``--config run_qwen3_4b_dapo_npu.sh`` (stage ``rl``): also the SFT model and a sandbox on this node.

A check that fails because an input does not exist yet names the README step that makes it (``Check.step``); a stage
turns such a failure into a ``NEXT`` line when the step comes after the stage. Everything else (a wrong version, a
weak sandbox, data converted for another profile) fails at every stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from retool.checklist import FAIL, NEXT, Check

STAGES = ("install", "sft", "rl")
# The steps of the README's quick start, in order; `ray` only for a multi-node RL run.
DOWNLOAD, PREPARE, SFT, SANDBOX, RAY = "download", "prepare", "sft", "sandbox", "ray"
ORDER = (DOWNLOAD, PREPARE, "doctor sft", SFT, SANDBOX, RAY, "doctor rl", "rl")
NEEDED = {"install": set(), "sft": {DOWNLOAD, PREPARE}, "rl": {DOWNLOAD, PREPARE, SFT, SANDBOX, RAY}}
# Where a stage's list of next steps ends: at the next doctor call, or at the launch it clears.
LAST = {"install": "doctor sft", "sft": SFT, "rl": "rl"}
OPTIONAL = {RAY}  # listed only when a check asked for it
SFT_MODEL = "<the model the SFT stage printed>"


@dataclass(frozen=True)
class Launchers:
    """The launcher names of one device (``trainer.device`` of the checked config)."""

    sft: str
    rl: str

    @classmethod
    def of(cls, device: str | None) -> Launchers:
        suffix = "cuda" if device == "cuda" else "npu"
        return cls(f"run_qwen3_4b_sft_{suffix}.sh", f"run_qwen3_4b_dapo_{suffix}.sh")


def commands(launchers: Launchers, profile: str, nnodes: int, sft_model: str = SFT_MODEL) -> dict[str, str]:
    """The README's command of every step."""
    return {
        DOWNLOAD: "retool-data download",
        PREPARE: f"retool-data prepare --profile {profile}",
        "doctor sft": f"retool-doctor --config {launchers.sft}",
        SFT: f"./{launchers.sft}",
        SANDBOX: "retool-sandbox serve    # on every node, left running (docs/multinode.md)",
        RAY: f"ray start --head; ray start --address=<head>:6379 on the other {nnodes - 1} node(s)",
        "doctor rl": f"MODEL_PATH={sft_model} retool-doctor --config {launchers.rl}",
        "rl": f"MODEL_PATH={sft_model} ./{launchers.rl}",
    }


def apply_stage(stage: str, checks: list[Check]) -> list[Check]:
    """The checks as ``stage`` judges them: a failure for an input whose step comes later becomes NEXT."""
    return [
        Check(NEXT, c.name, *c.details, step=c.step)
        if c.status == FAIL and c.step and c.step not in NEEDED[stage]
        else c
        for c in checks
    ]


def next_steps(
    stage: str, checks: list[Check], launchers: Launchers, profile: str, nnodes: int = 1, sft_model: str = SFT_MODEL
) -> list[str]:
    """The README's commands from the first step not done yet to the stage's end (LAST)."""
    asked = {c.step for c in checks if c.status in (FAIL, NEXT) and c.step}
    first = min((ORDER.index(step) for step in asked), default=None)
    if first is None:  # nothing missing: the stage's own launch (or the next doctor call) is next
        first = ORDER.index(LAST[stage])
    end = max(ORDER.index(LAST[stage]), first)
    known = commands(launchers, profile, nnodes, sft_model)
    return [known[step] for step in ORDER[first : end + 1] if step not in OPTIONAL or step in asked]

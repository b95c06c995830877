"""``retool-doctor``: check a machine and a launcher's config before a run, one actionable line per check.

    retool-doctor [--stage install|sft|rl] [--config run_qwen3_4b_dapo_npu.sh | resolved.yaml | configs/rl.yaml]
                  [--sandbox-url URL] [--ray-address ADDR] [--override KEY=VALUE ...] [--device-memory-gb GB]
                  [--cann-info FILE]

The stage is where the user is on the README's path (``stages``): right after the install (``--stage install``)
what does not exist yet (data, model, SFT model, sandbox) is a ``[NEXT]`` line and the run is sized from the
recipe's Qwen3-4B shape; before a launch (the default: the config's own stage, sft or rl) what it needs must be
there. The output ends with the README's next commands.

Checks, in this order: Python and package versions against the pins in pyproject.toml, the verl patches applied to
the installed verl and, on an NPU config, the image's CANN / torch / torch_npu / vllm / vllm_ascend against
[tool.retool.npu_image] (``versions``); visible devices (npu / cuda / cpu) versus what the config asks for
(``devices``); the config resolves (``config``); model and data paths exist and parse, and the data was converted
for the run's profile, PROFILE (``inputs``); the tool config loads (``tool_config``); the sandbox answers, isolates
the model's code well enough for RL (RETOOL_ACCEPT_WEAK_ISOLATION=1 accepts less) and keeps enough sessions for a
per-trajectory tool (``sandbox``); Ray is reachable for multi-node (``cluster``); a rough per-device memory estimate
and the disk the checkpoints take against the free space (``resources``, arithmetic in ``estimate``).

``--config`` takes a launcher (run with DRY_RUN=1, which prints the resolved verl config), a resolved YAML (the
``<stage>.resolved.yaml`` a run folder keeps) or a recipe Hydra config (composed with verl's defaults).
Each line is ``[ OK ]``, ``[WARN]``, ``[FAIL]``, ``[SKIP]`` or ``[NEXT]`` (retool/checklist.py); the exit code is 1
when any check fails.
"""

"""The ``retool-doctor`` command: parse the arguments, run the checks in order, print one line each, exit 1 on any
failure (what each check does: the package docstring, retool/doctor/__init__.py)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import retool.doctor
from retool.checklist import FAIL, OK, SKIP, WARN, Check, exit_status, render, summary
from retool.doctor.cluster import check_ray
from retool.doctor.config import ConfigError, config_kind, config_source, dig, load_config, model_path
from retool.doctor.devices import check_devices, detect_devices
from retool.doctor.estimate import KNOWN_MODELS, RECIPE_MODEL
from retool.doctor.inputs import MODEL_PATH_NOT_SET, check_data, check_model, check_profile_data, run_profile
from retool.doctor.resources import check_disk, check_memory
from retool.doctor.sandbox import check_sandbox, check_sessions
from retool.doctor.stages import SFT_MODEL, STAGES, Launchers, apply_stage, next_steps
from retool.doctor.tool_config import check_tool_config
from retool.doctor.versions import check_npu_stack, check_packages, check_patches, check_python, load_pins
from retool_sandbox.client import SandboxURLError, base_url


def _other_server(checked: str, tool_url: str) -> bool:
    """True when two sandbox URLs name different servers (an invalid one is the sandbox line's to report)."""
    try:
        return base_url(checked) != base_url(tool_url)
    except SandboxURLError:
        return False


def run_checks(args: argparse.Namespace) -> tuple[list[Check], dict[str, Any] | None, str]:
    """Every check, as the stage judges it (retool.doctor.stages); also the resolved config and the stage."""
    pins = load_pins()
    devices = detect_devices()
    cfg: dict[str, Any] | None = None
    source = ""
    config_check: Check | None = None
    if args.config is not None:
        try:
            source = config_source(args.config, args.override)
            cfg = load_config(args.config, args.override)
            kind = config_kind(cfg)
            config_check = Check(
                OK,
                "config",
                f"{args.config} resolves ({'RL' if kind == 'rl' else 'SFT'}, device "
                f"{dig(cfg, 'trainer.device', '?')}, {dig(cfg, 'trainer.nnodes', 1)} "
                f"node(s) x {dig(cfg, 'trainer.n_gpus_per_node', 1)})",
            )
        except ConfigError as e:
            config_check = Check(FAIL, "config", f"{e}")
    stage = args.stage or (config_kind(cfg) if cfg else "install")
    if cfg is not None and stage != "install" and stage != config_kind(cfg):
        config_check = Check(
            FAIL,
            "config",
            f"--stage {stage} checks the {stage.upper()} launcher, but {args.config} "
            f"is an {config_kind(cfg).upper()} config",
        )
    extra = args.extra or (dig(cfg, "trainer.device") if cfg else None) or devices.kind
    extra = extra if extra in (pins.get("extras") or {}) else devices.kind
    checks = [check_python(pins, extra), check_packages(pins, extra), check_patches(extra=extra)]
    why = "pass --config" if args.config is None else "the config did not resolve"
    checks.append(Check(SKIP, "npu stack", why) if cfg is None else check_npu_stack(cfg, pins, args.cann_info))
    checks.append(check_devices(devices, cfg))
    sandbox_url = args.sandbox_url
    if config_check is not None:
        checks.append(config_check)
    if cfg is None:
        checks += [Check(SKIP, name, why) for name in ("model", "data", "profile data", "tool config")]
        checks.append(check_sandbox(sandbox_url))
        checks.append(Check(SKIP, "sessions", why))
        checks.append(check_ray(args.ray_address or os.environ.get("RAY_ADDRESS"), cfg))
        checks += [Check(SKIP, name, why) for name in ("memory", "disk")]
        return apply_stage(stage, checks), cfg, stage
    model_check, hf = check_model(cfg)
    checks += [model_check, check_data(cfg), check_profile_data(cfg, source, args.config)]
    tool_check, tool_url = check_tool_config(cfg)
    checks.append(tool_check)
    if sandbox_url and tool_url and _other_server(sandbox_url, tool_url):
        checks.append(
            Check(
                WARN,
                "sandbox url",
                f"checking {base_url(sandbox_url)} but the tool config sends "
                f"code to {tool_url}: set RETOOL_SANDBOX_URL (or --sandbox-url) "
                "to the same server",
            )
        )
    sandbox_url = sandbox_url or tool_url
    rl = config_kind(cfg) == "rl"
    checks.append(check_sandbox(sandbox_url, rl=rl))
    checks.append(check_sessions(cfg, sandbox_url) if rl else Check(SKIP, "sessions", "SFT config: no rollout tools"))
    checks.append(check_ray(args.ray_address or os.environ.get("RAY_ADDRESS"), cfg))
    # Right after the install the model folder is not there yet: size the run with the recipe's own model.
    shape = args.model_config or (RECIPE_MODEL if stage == "install" and hf is None else None)
    checks.append(check_memory(cfg, hf, devices, args.device_memory_gb, shape))
    checks.append(check_disk(cfg, hf, shape))
    return apply_stage(stage, checks), cfg, stage


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retool-doctor", description=retool.doctor.__doc__.split("\n\n")[0])
    parser.add_argument(
        "--stage",
        choices=STAGES,
        default=None,
        help="where you are on the README's path: install (right after installing: what is not "
        "there yet is listed as next steps), sft or rl (before that launch: everything it needs "
        "must be there). Default: the config's stage (sft or rl); install without --config",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="launcher .sh (run with DRY_RUN=1), resolved YAML, or recipe Hydra YAML",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Hydra override for --config (passed to a launcher as an argument); repeatable",
    )
    parser.add_argument(
        "--sandbox-url",
        default=None,
        help="sandbox base or /run_code URL (default: the tool config's sandbox_fusion_url)",
    )
    parser.add_argument("--ray-address", default=None, help="Ray cluster to check (default: $RAY_ADDRESS)")
    parser.add_argument(
        "--extra",
        choices=["cpu", "cuda", "npu"],
        default=None,
        help="which pinned extra to check (default: the config's trainer.device, else this host's)",
    )
    parser.add_argument(
        "--model-config",
        default=None,
        help=f"model shape for the memory and disk estimates when the model folder is elsewhere: "
        f"{', '.join(KNOWN_MODELS)} or a config.json path",
    )
    parser.add_argument(
        "--device-memory-gb",
        type=float,
        default=None,
        help="memory per device for the estimate (default: read from the device, 64 for an A3 die)",
    )
    parser.add_argument(
        "--cann-info",
        type=Path,
        default=None,
        help="CANN's ascend_toolkit_install.info for the NPU stack check (default: found through "
        "ASCEND_TOOLKIT_HOME or under /usr/local/Ascend)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    checks, cfg, stage = run_checks(args)
    print(render(checks))
    print(f"retool-doctor ({stage} stage): {summary(checks)}")
    device = dig(cfg, "trainer.device") if cfg else None
    if device in ("npu", "cuda"):  # the README's path; the CPU smoke (make smoke) builds its own inputs
        model = (
            model_path(cfg)
            if stage == "rl" and dig(cfg, "actor_rollout_ref.model.path") != MODEL_PATH_NOT_SET
            else SFT_MODEL
        )
        steps = next_steps(
            stage, checks, Launchers.of(device), run_profile()[0], int(dig(cfg, "trainer.nnodes", 1) or 1), str(model)
        )
        print("next, as in the README:\n" + "\n".join(f"  {step}" for step in steps))
    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())

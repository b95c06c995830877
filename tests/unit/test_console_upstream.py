"""The texts the console still scrapes exist in the pinned stack, in the shape its patterns expect.

The console takes steps, validations and the end of start-up from verl's output lines, and hides known start-up noise
by its wording (retool.console.notices.KNOWN_HARMLESS). An upgrade of verl, vLLM, torch, Ray or transformers that
rewords one of these would break the console without any other test failing: here each text is found in the
installed package's source (a fragment on one line of the code that prints it, or the bytes of a compiled library),
and the console's pattern recognises the line that code prints."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import pytest

from retool.console import lines, notices, stream


@cache
def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise AssertionError(f"{package} is not installed: run `make setup`")
    return Path(next(iter(spec.submodule_search_locations)))


def found(package: str, where: str, fragment: str) -> list[Path]:
    """The files matching ``where`` (a glob under ``package``) that hold ``fragment``."""
    return [path for path in sorted(package_dir(package).glob(where)) if fragment.encode() in path.read_bytes()]


# what the console's state comes from: (pattern, package, file, fragment of the printing code, a line it prints)
STATE = {
    "verl's metric line": (
        lines.STEP,
        "verl",
        "utils/logger/aggregate_logger.py",
        'output = [f"step:{step}"]',
        "step:3 - critic/rewards/mean:0.25 - timing_s/step:12.5",
    ),
    "verl's metric line joined with ' - '": (
        lines.STEP,
        "verl",
        "utils/logger/aggregate_logger.py",
        'output_str = " - ".join(output)',
        "step:3 - critic/rewards/mean:0.25",
    ),
    "the workers are up": (
        stream.READY,
        "verl",
        "trainer/ppo/v1/trainer_base.py",
        'logger.info("all initialize finished, ready to fit")',
        "all initialize finished, ready to fit",
    ),
    "a checkpoint is saved": (
        stream.CHECKPOINT,
        "verl",
        "trainer/ppo/v1/trainer_base.py",
        'logger.info(f"Saving checkpoint to {local_global_step_folder}")',
        "Saving checkpoint to /r/global_step_4",
    ),
    "an SFT checkpoint is saved": (
        stream.CHECKPOINT,
        "verl",
        "utils/checkpoint/checkpoint_handler.py",
        'print(f"Saving checkpoint to: {local_global_step_folder}")',
        "Saving checkpoint to: /r/global_step_64",
    ),
    "a resume": (
        stream.RESUMING,
        "verl",
        "trainer/ppo/v1/trainer_base.py",
        'logger.info(f"Resuming from {global_step_folder}',
        "Resuming from /r/global_step_4, setting global step to 5",
    ),
    "RL's step count": (
        lines.TOTAL_STEPS,
        "verl",
        "trainer/ppo/v1/trainer_base.py",
        'logger.info(f"Total training steps: {self.total_training_steps}")',
        "Total training steps: 130",
    ),
    "SFT's step count": (
        lines.TOTAL_STEPS,
        "verl",
        "trainer/sft_trainer.py",
        'f"Total training steps: {self.total_training_steps},"',
        "Total training steps: 186,",
    ),
    "SFT's epoch bar": (
        lines.EPOCH,
        "verl",
        "trainer/sft_trainer.py",
        'desc=f"Epoch {epoch + 1}/{self.config.trainer.total_epochs}"',
        "Epoch 1/6",
    ),
    "the prompt groups rolled out": (
        stream.GROUPS,
        "verl",
        "trainer/ppo/v1/replay_buffer.py",
        'f"pending: {len(self.pending_keys[partition_id])}, "',
        "pending: 3, running: 2, finished: 7, failure: 0",
    ),
    "verl's log format": (
        lines.LEVEL_SHAPES[1],
        "verl",
        "utils/logging_utils.py",
        '"%(levelname)s:%(asctime)s:%(message)s"',
        "WARNING:2026-12-02 15:52:54,620:a message",
    ),
    "vLLM's log format": (
        lines.LEVEL_SHAPES[2],
        "vllm",
        "logger.py",
        '%(levelname)s %(asctime)s "',
        "WARNING 12-02 15:52:51 [importing.py:73] a message",
    ),
}


@pytest.mark.parametrize("what", sorted(STATE))
def test_a_text_the_console_takes_state_from_is_printed_by_the_pinned_stack(what):
    pattern, package, where, fragment, printed = STATE[what]
    assert found(package, where, fragment), f"{package}/{where} no longer holds {fragment!r}: see {what}"
    assert pattern.search(printed), (what, pattern.pattern, printed)


def test_the_rl_progress_bar_is_named_as_the_console_expects():
    assert found("verl", "trainer/ppo/v1/trainer_base.py", f'desc="{stream.PROGRESS}")')
    description, done, total, _ = lines.parse_bar("Training Progress:  25%|██▌       | 3/12 [00:30<01:30, 10.0s/it]")
    assert description.endswith(stream.PROGRESS) and (done, total) == (3, 12)


# each known-harmless message: (package, file glob, fragment of the code that prints it, the message as printed)
HARMLESS = {
    r"(torchtitan|veomni|automodel|mindspeed|megatron) engine is not available": (
        "verl",
        "workers/engine/__init__.py",
        'f"veomni engine is not available: {e!r}"',
        "veomni engine is not available: ModuleNotFoundError('veomni')",
    ),
    r"Disabled critic as algorithm\.adv_estimator != gae": (
        "verl",
        "trainer/ppo/utils.py",
        '"Disabled critic as algorithm.adv_estimator != gae. ',
        "Disabled critic as algorithm.adv_estimator != gae. If it is not intended, please set critic.enable=True",
    ),
    r"'set_vital' is deprecated": (
        "torch",
        "__init__.py",
        "is deprecated, please do not call",
        "'set_vital' is deprecated, please do not call",
    ),
    r"Triton is installed, but `triton\.backends` could not be imported": (
        "vllm",
        "triton_utils/importing.py",
        '"Triton is installed, but `triton.backends` could not be imported. "',
        "Triton is installed, but `triton.backends` could not be imported. Disabling Triton.",
    ),
    r"Model Runner V2 requires Triton": (
        "vllm",
        "config/vllm.py",
        "Model Runner V2 requires Triton",
        "Model Runner V2 requires Triton",
    ),
    r"Enforce eager set, disabling torch\.compile": (
        "vllm",
        "config/vllm.py",
        "Enforce eager set, disabling torch.compile",
        "Enforce eager set, disabling torch.compile and CUDAGraphs.",
    ),
    r"Inductor compilation was disabled by user settings": (
        "vllm",
        "config/vllm.py",
        "Inductor compilation was disabled by user settings",
        "Inductor compilation was disabled by user settings, optimizations settings that are only active during "
        "inductor compilation will be ignored.",
    ),
    r"LoRA dynamic loading & unloading is enabled": (
        "vllm",
        "entrypoints/serve/lora/api_router.py",
        "LoRA dynamic loading & unloading is enabled",
        "LoRA dynamic loading & unloading is enabled in the API server. This should ONLY be used for local "
        "development!",
    ),
    r"Default vLLM sampling parameters have been overridden by the model's": (
        "vllm",
        "config/model.py",
        "Default vLLM sampling parameters have been overridden by",
        "Default vLLM sampling parameters have been overridden by the model's `generation_config.json`",
    ),
    r"Passing raw prompts to InputProcessor is deprecated": (
        "vllm",
        "v1/engine/input_processor.py",
        "Passing raw prompts to InputProcessor is deprecated",
        "Passing raw prompts to InputProcessor is deprecated and will be removed in v0.18.",
    ),
    r"target_num_threads \d+ should not exceed total physical CPU cores": (
        "transfer_queue",
        "utils/common.py",
        'f"target_num_threads {target_num_threads} should not exceed total "',
        "target_num_threads 8 should not exceed total physical CPU cores 2. Setting to 2.",
    ),
    r"Token authentication is enabled for this Ray cluster": (
        "ray",
        "_private/authentication/authentication_token_setup.py",
        "Token authentication is enabled for this Ray cluster",
        "Token authentication is enabled for this Ray cluster.",
    ),
    r"is_fx_tracing will return true": (
        "torch",
        "fx/_symbolic_trace.py",
        "is_fx_tracing will return true",
        "is_fx_tracing will return true for both fx.symbolic_trace and torch.fx.experimental.proxy_tensor",
    ),
    r"`torch_dtype` is deprecated": (
        "transformers",
        "modeling_utils.py",
        "`torch_dtype` is deprecated",
        "`torch_dtype` is deprecated! Use `dtype`!",
    ),
    r"No backend of type 0 found for Process Group": (
        "torch",
        "lib/libtorch_python.so",
        "No backend of type",
        "No backend of type 0 found for Process Group with name undefined. Assuming no hooks are registered.",
    ),
    r"Failed to set NUMA affinity|NUMA binding: Using MEMBIND": (
        "verl",
        "utils/distributed.py",
        'print(f"Warning: Failed to set NUMA affinity: {e}")',
        "Failed to set NUMA affinity: libnuma not found",
    ),
    r"(libtcmalloc|libiomp) is not found in LD_PRELOAD": (
        "vllm",
        "v1/worker/cpu_worker.py",
        '"%s is not found in LD_PRELOAD. "',
        "libtcmalloc is not found in LD_PRELOAD. For best performance, please follow the section",
    ),
    r"RotaryEmbedding: Failed to load weights": (
        "vllm",
        "model_executor/model_loader/reload/layerwise.py",
        '"%s: Failed to load weights"',
        "RotaryEmbedding: Failed to load weights",
    ),
    r"Using blocking ray\.get inside async actor": (
        "ray",
        "_private/worker.py",
        "Using blocking ray.get inside async actor",
        "Using blocking ray.get inside async actor. This blocks the event loop.",
    ),
    r"pickling/unpickling of the DeviceMesh occurred before the PGs were created": (
        "torch",
        "distributed/device_mesh.py",
        '"It seems like pickling/unpickling of the DeviceMesh "',
        "It seems like pickling/unpickling of the DeviceMesh occurred before the PGs were created",
    ),
    r"Function 'verl\.utils\.import_utils\.load_extern_type' is deprecated": (
        "verl",
        "utils/import_utils.py",
        """msg = f"Warning: Function '{qualified_name}' is deprecated.\"""",
        "Warning: Function 'verl.utils.import_utils.load_extern_type' is deprecated.",
    ),
}
# the second half of the NUMA pattern is vLLM's C++ (utils.cpp, compiled into each CPU variant of vllm/_C*.so)
NUMA_MEMBIND = ("vllm", "_C*.so", "NUMA binding: Using MEMBIND")


def test_every_known_harmless_message_has_its_source_here():
    assert set(HARMLESS) == {pattern for pattern, _ in notices.KNOWN_HARMLESS}


@pytest.mark.parametrize("pattern", sorted(HARMLESS))
def test_a_known_harmless_message_is_still_printed_by_the_pinned_stack(pattern):
    package, where, fragment, printed = HARMLESS[pattern]
    assert found(package, where, fragment), (
        f"{package}/{where} no longer holds {fragment!r}: drop or reword {pattern!r}"
    )
    assert notices.is_known_harmless(printed), (pattern, printed)


def test_vllm_s_numa_binding_notice_is_in_its_compiled_library():
    assert found(*NUMA_MEMBIND)
    assert notices.is_known_harmless("NUMA binding: Using MEMBIND with nodes 0")


def test_a_fragment_that_is_not_there_is_reported():
    # the check itself can fail: a reworded text is not found
    assert not found("verl", "trainer/ppo/v1/trainer_base.py", "all initialize finished, ready to FIT")

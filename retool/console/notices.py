"""Warnings and errors on the console: each distinct one at once, repeats counted, known start-up noise kept to the log.

A stage prints the same warning from every Ray worker and every vLLM process, and a few dozen that say nothing about
this run (an optional verl engine that is not installed, vLLM's own defaults). Shown on the console: the first
occurrence of each distinct message (numbers and ids blanked, retool.console.lines.fingerprint), up to
``WARNING_LIMIT`` distinct warnings; every distinct error, and again when it has repeated 10, 100, 1000... times.
Hidden: the messages of ``KNOWN_HARMLESS`` below, each with the reason it is harmless. Everything stays in the log.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from retool.console.lines import Level, fingerprint

WARNING_LIMIT = 12
ERROR_LIMIT = 40
# (pattern on the message, why it is harmless for this recipe)
KNOWN_HARMLESS = [
    (
        r"(torchtitan|veomni|automodel|mindspeed|megatron) engine is not available",
        "verl probes optional training engines; the recipe uses FSDP",
    ),
    (r"Disabled critic as algorithm\.adv_estimator != gae", "GRPO has no critic by design"),
    (r"'set_vital' is deprecated", "torchdata calls a deprecated torch API internally"),
    (r"Triton is installed, but `triton\.backends` could not be imported", "CPU build of vLLM: no Triton kernels"),
    (r"Model Runner V2 requires Triton", "CPU build of vLLM: the V1 runner is the one it has"),
    (r"Enforce eager set, disabling torch\.compile", "enforce_eager is the recipe's setting"),
    (r"Inductor compilation was disabled by user settings", "torch.compile is off by the recipe's setting"),
    (r"LoRA dynamic loading & unloading is enabled", "verl's rollout server enables it; no LoRA adapters are served"),
    (
        r"Default vLLM sampling parameters have been overridden by the model's",
        "verl passes its own sampling parameters with every request",
    ),
    (r"Passing raw prompts to InputProcessor is deprecated", "verl 0.9.1's call into vLLM; works in this vLLM"),
    (r"target_num_threads \d+ should not exceed total physical CPU cores", "TransferQueue caps its threads itself"),
    (r"Token authentication is enabled for this Ray cluster", "Ray's default for a local cluster"),
    (r"is_fx_tracing will return true", "torch notice about its tracing API"),
    (r"`torch_dtype` is deprecated", "transformers renamed an argument verl still passes"),
    (r"No backend of type 0 found for Process Group", "torch notice at process-group shutdown"),
    (r"Failed to set NUMA affinity|NUMA binding: Using MEMBIND", "CPU host without libnuma or with one NUMA node"),
    (r"(libtcmalloc|libiomp) is not found in LD_PRELOAD", "CPU performance hint of vLLM; the smoke does not need it"),
    (r"RotaryEmbedding: Failed to load weights", "rotary embeddings hold no weights (layer-wise reload, patch 0003)"),
    (r"Using blocking ray\.get inside async actor", "verl's agent loop manager; no effect at this scale"),
    (
        r"pickling/unpickling of the DeviceMesh occurred before the PGs were created",
        "matters only with torch.compile, which verl's model merger does not use",
    ),
    (
        r"Function 'verl\.utils\.import_utils\.load_extern_type' is deprecated",
        "verl calls its own deprecated loader for the recipe's reward function",
    ),
]
_HARMLESS = [re.compile(pattern) for pattern, _ in KNOWN_HARMLESS]


def is_known_harmless(message: str) -> bool:
    return any(pattern.search(message) for pattern in _HARMLESS)


@dataclass
class Notices:
    """Decides which warning and error lines reach the console; counts the rest for the stage's last line."""

    warning_limit: int = WARNING_LIMIT
    error_limit: int = ERROR_LIMIT
    seen: Counter = field(default_factory=Counter)  # fingerprint -> occurrences
    shown: dict[str, int] = field(default_factory=lambda: {"warning": 0, "error": 0})
    hidden: Counter = field(default_factory=Counter)  # "harmless" | "repeat" | "over limit" -> lines

    def add(self, notice: Level) -> str | None:
        """The console text for ``notice``, or None to keep it to the log."""
        key = f"{notice.level}:{fingerprint(notice.message)}"
        self.seen[key] += 1
        count = self.seen[key]
        if is_known_harmless(notice.message):
            self.hidden["harmless"] += 1
            return None
        message = notice.message if len(notice.message) <= 300 else notice.message[:297] + "..."
        if count > 1:
            if notice.level == "error" and _is_power_of_ten(count):
                return f"error (x{count} so far): {message}"
            self.hidden["repeat"] += 1
            return None
        limit = self.warning_limit if notice.level == "warning" else self.error_limit
        if self.shown[notice.level] >= limit:
            self.hidden["over limit"] += 1
            return None
        self.shown[notice.level] += 1
        where = f" ({notice.where})" if notice.where and notice.level == "error" else ""
        return f"{notice.level}: {message}{where}"

    def summary(self) -> str | None:
        """What was kept to the log, or None when every warning and error was shown."""
        if not sum(self.hidden.values()):
            return None
        counts = {
            "repeated": self.hidden["repeat"],
            "known harmless": self.hidden["harmless"],
            "beyond the first distinct ones": self.hidden["over limit"],
        }
        parts = [f"{count} {what}" for what, count in counts.items() if count]
        return f"warnings and errors only in the log: {', '.join(parts)}"


def _is_power_of_ten(count: int) -> bool:
    while count % 10 == 0 and count > 1:
        count //= 10
    return count == 1

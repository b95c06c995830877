"""``retool-doctor``: check a machine and a launcher's config before a run, one actionable line per check.

    retool-doctor [--config run_qwen3_4b_dapo_npu.sh | resolved.yaml | configs/dapo.yaml] [--sandbox-url URL]
                  [--ray-address ADDR] [--override KEY=VALUE ...] [--device-memory-gb GB]

Checks: Python and package versions against the pins in pyproject.toml; the verl patches applied to the installed
verl; visible devices (npu / cuda / cpu) versus what the config asks for; the sandbox answers (and which isolation
it uses); model and data paths exist and parse; the tool config loads; Ray is reachable for multi-node; a rough
per-device memory estimate for the configured model, sequence lengths and offload settings.

``--config`` takes a launcher (run with DRY_RUN=1, which prints the resolved verl config), a resolved YAML (the
``<stage>.resolved.yaml`` a run folder keeps) or a recipe Hydra config (composed with verl's defaults).
Each line is ``[ OK ]``, ``[WARN]``, ``[FAIL]`` or ``[SKIP]``; the exit code is 1 when any check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import io
import json
import os
import platform
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3
OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"

# Device memory when the device is not visible here (checking an NPU launcher on a laptop): Atlas A3, per die.
KNOWN_DEVICE_MEMORY_GB = {"npu": 64.0}
# Shapes for when the model folder is not on this machine (public config.json values).
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    "qwen3-4b": {"hidden_size": 2560, "num_hidden_layers": 36, "intermediate_size": 9728, "vocab_size": 151936,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True},
}


@dataclass
class Check:
    """One result: status (OK/WARN/FAIL/SKIP), the check's name and a line that says what to do."""

    status: str
    name: str
    message: str

    def line(self) -> str:
        return f"[{self.status:^4}] {self.name}: {self.message}"


# ---------------------------------------------------------------- small helpers


def dig(cfg: dict[str, Any] | None, dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for "a.b"; ``default`` when any step is missing."""
    node: Any = cfg
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):  # a list given as a string override: "[a.parquet, b.parquet]"
        return [p.strip().strip("'\"") for p in text.strip("[]").split(",") if p.strip()]
    return [text]


def base_url(url: str) -> str:
    """http://host:port from a base URL or a /run_code URL."""
    url = url.strip().rstrip("/")
    return url[: -len("/run_code")] if url.endswith("/run_code") else url


# ---------------------------------------------------------------- pins and versions


def load_pins(pyproject: Path = REPO_ROOT / "pyproject.toml") -> dict[str, Any]:
    """{"requires_python", "core": [...], "extras": {name: [...]}, "verl": {...}} from the checkout or metadata."""
    if pyproject.is_file():
        import tomllib

        data = tomllib.loads(pyproject.read_text())
        project = data.get("project", {})
        return {"requires_python": project.get("requires-python"), "core": project.get("dependencies", []),
                "extras": project.get("optional-dependencies", {}),
                "verl": data.get("tool", {}).get("retool", {}).get("verl", {}), "source": str(pyproject)}
    # An installed (non-editable) retool: the same requirements from its metadata; the verl pin is not there.
    try:
        meta = md.metadata("retool")
        requires = md.requires("retool") or []
    except md.PackageNotFoundError:
        return {}
    core, extras = [], {}
    for req in requires:
        found = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", req)
        spec = req.split(";")[0].strip()
        (extras.setdefault(found.group(1), []) if found else core).append(spec)
    return {"requires_python": meta.get("Requires-Python"), "core": core, "extras": extras, "verl": {},
            "source": "installed retool metadata"}


def check_python(pins: dict[str, Any]) -> Check:
    from packaging.specifiers import SpecifierSet

    version = platform.python_version()
    spec = pins.get("requires_python")
    if not spec:
        return Check(WARN, "python", f"{version}; cannot read requires-python (no pyproject.toml or retool metadata)")
    if version in SpecifierSet(spec):
        return Check(OK, "python", f"{version} ({sys.executable}) satisfies {spec}")
    return Check(FAIL, "python", f"{version} does not satisfy {spec}: use the project venv (make setup) or a "
                                 f"Python {spec}")


def check_packages(pins: dict[str, Any], extra: str) -> Check:
    """Installed versions against the core pins and those of ``extra``."""
    from packaging.requirements import Requirement

    if not pins:
        return Check(WARN, "packages", "cannot read the pins: run from the repository checkout or install retool")
    wanted = list(pins.get("core", [])) + list(pins.get("extras", {}).get(extra, []))
    problems, checked = [], 0
    for text in wanted:
        req = Requirement(text)
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            problems.append(f"{req.name} missing (want {req.specifier or 'any'})")
            continue
        checked += 1
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name} {version} (want {req.specifier})")
    verl_pin = pins.get("verl", {}).get("version")
    if verl_pin:
        try:
            installed = md.version("verl")
            checked += 1
            if installed != verl_pin:
                problems.append(f"verl {installed} (want {verl_pin})")
        except md.PackageNotFoundError:
            problems.append(f"verl missing (want {verl_pin})")
    if problems:
        fix = "python -m retool.verl_install install" if any(p.startswith("verl") for p in problems) else ""
        how = f"pip install -e '.[{extra}]'" + (f" and {fix}" if fix else "")
        return Check(FAIL, "packages", f"[{extra}] {'; '.join(problems)} -> {how}")
    return Check(OK, "packages", f"{checked} pinned packages of core + [{extra}] match ({pins.get('source')})")


def check_patches(status_fn: Callable[[], list[tuple[str, bool]]] | None = None) -> Check:
    """verl patches from retool.verl_install.applied_patches_status (judged on the installed files)."""
    if status_fn is None:
        try:
            from retool.verl_install import applied_patches_status as status_fn
        except ImportError as e:
            return Check(WARN, "verl patches", f"cannot check: retool.verl_install is not available ({e})")
    try:
        status = status_fn()
    except Exception as e:  # a missing `patch` binary or verl: say so, do not crash the doctor
        return Check(WARN, "verl patches", f"cannot check: {type(e).__name__}: {e}")
    if not status:
        return Check(OK, "verl patches", "the recipe carries no patches")
    missing = [name for name, applied in status if not applied]
    if missing:
        return Check(FAIL, "verl patches", f"not applied: {', '.join(missing)} -> python -m retool.verl_install "
                                           "install (reinstalls the pinned verl with patches/)")
    return Check(OK, "verl patches", f"all {len(status)} applied ({', '.join(n for n, _ in status)})")


# ---------------------------------------------------------------- devices


@dataclass
class Devices:
    kind: str  # npu | cuda | cpu
    count: int
    memory_gb: float | None  # per device (host RAM for cpu)
    name: str = ""


def host_memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    return None


def detect_devices() -> Devices:
    """NPUs through torch_npu, else CUDA GPUs through torch, else the host CPU."""
    try:
        import torch
    except ImportError:
        return Devices("cpu", 1, host_memory_gb(), platform.processor() or "cpu")
    try:
        import torch_npu  # noqa: F401

        if torch.npu.is_available() and torch.npu.device_count() > 0:
            props = torch.npu.get_device_properties(0)
            return Devices("npu", torch.npu.device_count(), props.total_memory / GIB, props.name)
    except Exception:  # no torch_npu, or no driver: not an NPU host
        pass
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        props = torch.cuda.get_device_properties(0)
        return Devices("cuda", torch.cuda.device_count(), props.total_memory / GIB, props.name)
    return Devices("cpu", 1, host_memory_gb(), f"{os.cpu_count()} CPU cores")


def check_devices(devices: Devices, cfg: dict[str, Any] | None) -> Check:
    seen = f"{devices.count} x {devices.kind}" + (f" ({devices.name})" if devices.name else "")
    if cfg is None:
        return Check(OK, "devices", f"{seen} visible; pass --config to compare with a launcher's request")
    want_kind = dig(cfg, "trainer.device", "cuda")
    want = int(dig(cfg, "trainer.n_gpus_per_node", 1) or 1)
    nnodes = int(dig(cfg, "trainer.nnodes", 1) or 1)
    if want_kind == "cpu":
        # CPU runs use a bookkeeping "GPU" per worker; the host is the device.
        return Check(OK, "devices", f"config runs on the host CPU ({os.cpu_count()} cores, "
                                    f"{want} worker(s) per node); {seen} visible")
    if devices.kind != want_kind:
        hint = {"npu": "is torch_npu installed (the CANN image) and ASCEND_RT_VISIBLE_DEVICES set?",
                "cuda": "is the CUDA build of torch installed and CUDA_VISIBLE_DEVICES set?"}.get(want_kind, "")
        return Check(FAIL, "devices", f"config asks for {want} x {want_kind} per node but this host shows {seen}; "
                                      f"{hint} (or check the config on the target machine)")
    if devices.count < want:
        return Check(FAIL, "devices", f"config asks for {want} x {want_kind} per node (trainer.n_gpus_per_node) but "
                                      f"only {devices.count} are visible: lower NPROC_PER_NODE / "
                                      "trainer.n_gpus_per_node or free the devices")
    extra = f"; {devices.count - want} more visible than used" if devices.count > want else ""
    return Check(OK, "devices", f"{want} x {want_kind} per node x {nnodes} node(s) requested, {seen} visible{extra}")


# ---------------------------------------------------------------- config


class ConfigError(RuntimeError):
    pass


def load_config(path: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """A resolved config dict from a launcher (.sh, DRY_RUN=1), a resolved YAML, or a Hydra recipe YAML."""
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    if path.suffix == ".sh":
        env = {**os.environ, "DRY_RUN": "1"}
        try:
            proc = subprocess.run(["bash", str(path), *overrides], capture_output=True, text=True, env=env,
                                  timeout=300)
        except subprocess.TimeoutExpired as e:
            raise ConfigError(f"DRY_RUN=1 {path} did not finish in 300 s") from e
        if proc.returncode != 0:
            raise ConfigError(f"DRY_RUN=1 {path} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
        return parse_printed_yaml(proc.stdout, f"DRY_RUN=1 {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a YAML mapping")
    if "defaults" not in data and not overrides:
        return data  # already resolved (a run folder's <stage>.resolved.yaml)
    return compose_recipe(path, overrides)


def parse_printed_yaml(text: str, what: str) -> dict[str, Any]:
    """YAML printed by Hydra's --cfg job, tolerating lines a launcher printed before it."""
    lines = text.splitlines()
    for start in range(len(lines)):
        if not re.match(r"^[A-Za-z_][\w-]*:", lines[start]):
            continue
        try:
            data = yaml.safe_load("\n".join(lines[start:]))
        except yaml.YAMLError:
            continue
        if isinstance(data, dict):
            return data
    raise ConfigError(f"{what} printed no YAML config (does the launcher support DRY_RUN=1?)")


def compose_recipe(path: Path, overrides: Sequence[str]) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    os.environ.setdefault("RETOOL_REPO_DIR", str(REPO_ROOT))
    try:
        with initialize_config_dir(config_dir=str(path.parent.resolve()), version_base=None):
            cfg = compose(config_name=path.stem, overrides=list(overrides))
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:  # Hydra and OmegaConf raise many types; all mean "this config does not compose"
        raise ConfigError(f"cannot compose {path} with {list(overrides)}: {e}") from e


def config_kind(cfg: dict[str, Any]) -> str:
    """"rl" (main_ppo) or "sft" (sft_trainer)."""
    return "rl" if "actor_rollout_ref" in cfg else "sft"


def model_path(cfg: dict[str, Any]) -> str | None:
    return dig(cfg, "actor_rollout_ref.model.path") if config_kind(cfg) == "rl" else dig(cfg, "model.path")


def check_model(cfg: dict[str, Any]) -> tuple[Check, dict[str, Any] | None]:
    """The model folder exists with a parsable config.json, tokenizer and weights; returns its config."""
    path_text = model_path(cfg)
    if not path_text:
        return Check(FAIL, "model", "the config sets no model path"), None
    path = Path(os.path.expanduser(str(path_text)))
    if not path.exists():
        return Check(FAIL, "model", f"{path} does not exist: set MODEL_PATH (launchers) or the config's model.path; "
                                    "the hub is not reachable at run time, so download it first"), None
    try:
        hf = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        return Check(FAIL, "model", f"{path}/config.json cannot be read ({e}): is this a Hugging Face folder? "
                                    "FSDP checkpoints need `python -m verl.model_merger merge` first"), None
    missing = []
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        missing.append("tokenizer files")
    if not list(path.glob("*.safetensors")) and not list(path.glob("*.bin")):
        missing.append("weights (*.safetensors)")
    if missing:
        return Check(FAIL, "model", f"{path} lacks {' and '.join(missing)}"), hf
    params = param_count(hf)
    return Check(OK, "model", f"{path} ({hf.get('model_type', '?')}, {params / 1e9:.2f} B parameters)"), hf


def check_data(cfg: dict[str, Any]) -> Check:
    """Train/val parquet files exist and carry the columns the stage reads."""
    import pyarrow.parquet as pq

    kind = config_kind(cfg)
    if kind == "rl":
        needed = ["data_source", str(dig(cfg, "data.prompt_key", "prompt")), "reward_model"]
    else:
        needed = [str(dig(cfg, "data.messages_key", "messages"))]
    files = [("train", f) for f in as_list(dig(cfg, "data.train_files"))]
    files += [("val", f) for f in as_list(dig(cfg, "data.val_files"))]
    if not files:
        return Check(FAIL, "data", "the config sets no data.train_files")
    problems, described = [], []
    for role, name in files:
        path = Path(os.path.expanduser(name))
        if not path.is_file():
            problems.append(f"{role} file {path} does not exist")
            continue
        try:
            meta = pq.read_metadata(path)
            columns = set(pq.read_schema(path).names)
        except Exception as e:  # pyarrow raises ArrowInvalid/OSError for non-parquet files
            problems.append(f"{path} is not a readable parquet file ({e})")
            continue
        lacking = [c for c in needed if c not in columns]
        if lacking:
            problems.append(f"{path} lacks columns {lacking} (has {sorted(columns)})")
        if kind == "rl" and "agent_name" not in columns:
            problems.append(f"{path} has no agent_name column: rows would use the single-turn loop, not the tool "
                            "loop (prepare it with retool-prepare-rl)")
        described.append(f"{role} {path.name} ({meta.num_rows} rows)")
    if problems:
        how = "retool-prepare-rl" if kind == "rl" else "retool-sft-preprocess"
        return Check(FAIL, "data", "; ".join(problems) + f" -> create them with {how} (README)")
    return Check(OK, "data", ", ".join(described))


def tool_config_path(cfg: dict[str, Any]) -> str | None:
    return dig(cfg, "actor_rollout_ref.rollout.multi_turn.tool_config_path")


@contextlib.contextmanager
def _environment(values: dict[str, Any]):
    """os.environ with ``values`` set, restored afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update({key: str(value) for key, value in values.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_tool_config(cfg: dict[str, Any]) -> tuple[Check, str | None]:
    """The tool YAML loads with verl's own loader (it instantiates the tool classes); returns the sandbox URL."""
    if config_kind(cfg) != "rl":
        return Check(SKIP, "tool config", "SFT config: no rollout tools"), None
    path = tool_config_path(cfg)
    if not path:
        return Check(FAIL, "tool config", "actor_rollout_ref.rollout.multi_turn.tool_config_path is not set: the "
                                          "model cannot call the code tool (use configs/tool.yaml)"), None
    if not Path(path).is_file():
        return Check(FAIL, "tool config", f"{path} does not exist (RETOOL_REPO_DIR points the recipe at it)"), None
    # The tool YAML is resolved in Ray workers, which see the job's runtime env (scripts/launch.sh puts
    # RETOOL_SANDBOX_URL there): check the URL training will post to, not this shell's.
    worker_env = dig(cfg, "ray_kwargs.ray_init.runtime_env.env_vars", None) or {}
    try:
        from verl.tools.tool_registry import initialize_tools_from_config

        with contextlib.redirect_stdout(io.StringIO()), _environment(worker_env):  # verl prints each schema
            tools = initialize_tools_from_config(path)
    except Exception as e:  # any import or validation error of the tool is what the user must fix
        return Check(FAIL, "tool config", f"{path} does not load: {type(e).__name__}: {e}"), None
    url = None
    for tool in tools:
        settings = getattr(tool, "settings", None)
        url = url or getattr(settings, "sandbox_fusion_url", None) or (getattr(tool, "config", {}) or {}).get(
            "sandbox_fusion_url")
    names = ", ".join(f"{t.name} ({type(t).__module__}.{type(t).__name__})" for t in tools)
    if not dig(cfg, "actor_rollout_ref.rollout.multi_turn.enable", False):
        return Check(WARN, "tool config", f"{path} loads ({names}) but multi_turn.enable is false"), url
    return Check(OK, "tool config", f"{path}: {names}" + (f" -> {url}" if url else "")), url


# ---------------------------------------------------------------- sandbox and Ray


def check_sandbox(url: str | None) -> Check:
    """The sandbox answers /v1/ping and runs print(6*7); /health (our server) names the isolation tier."""
    if not url:
        return Check(SKIP, "sandbox", "no --sandbox-url and no tool config to take it from")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return Check(FAIL, "sandbox", f"{url!r} is not an http(s) URL")
    base = base_url(url)
    start_hint = f"start it: retool-sandbox serve --host {parts.hostname} --port {parts.port or 8080}"
    try:
        with urllib.request.urlopen(base + "/v1/ping", timeout=5) as resp:
            pong = json.loads(resp.read() or b"null")
    except (urllib.error.URLError, OSError, ValueError) as e:
        return Check(FAIL, "sandbox", f"{base} does not answer GET /v1/ping ({e}) -> {start_hint}")
    if pong != "pong":
        return Check(FAIL, "sandbox", f"{base}/v1/ping answered {pong!r}, not \"pong\": not a sandbox?")
    payload = json.dumps({"code": "print(6*7)", "language": "python", "run_timeout": 10}).encode()
    request = urllib.request.Request(base + "/run_code", data=payload, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            body = json.loads(resp.read())
        stdout = (body.get("run_result") or {}).get("stdout", "")
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as e:
        return Check(FAIL, "sandbox", f"{base}/run_code failed on print(6*7): {e}")
    if stdout.strip() != "42":
        return Check(FAIL, "sandbox", f"{base}/run_code ran print(6*7) but returned {body!r:.300}")
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as resp:
            health = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return Check(WARN, "sandbox", f"{base} runs code but has no /health (SandboxFusion?): its default isolation "
                                      "is none (code runs as the server user); prefer retool-sandbox")
    isolation = health.get("isolation", "?")
    detail = (f"{base} runs code; isolation {isolation} ({health.get('mode', '?')} mode), "
              f"{health.get('slots', '?')} slots, python {health.get('python_version', '?')}")
    if isolation == "none":
        return Check(WARN, "sandbox", detail + " -> model code is not isolated; restart with --isolation auto")
    return Check(OK, "sandbox", detail)


def check_ray(address: str | None, cfg: dict[str, Any] | None) -> Check:
    nnodes = int(dig(cfg, "trainer.nnodes", 1) or 1) if cfg else 1
    if not address:
        if nnodes > 1:
            return Check(FAIL, "ray", f"config asks for {nnodes} nodes but no Ray cluster is given: start one "
                                      "(ray start --head; ray start --address=HEAD:6379 on the others) and pass "
                                      "--ray-address or set RAY_ADDRESS")
        return Check(OK, "ray", "single node: the trainer starts its own Ray")
    try:
        import ray

        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        try:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            resources = ray.cluster_resources()
        finally:
            ray.shutdown()
    except Exception as e:  # ConnectionError, RuntimeError, ...: all mean "not reachable"
        return Check(FAIL, "ray", f"cannot connect to {address} ({type(e).__name__}: {e}) -> is `ray start --head` "
                                  "running there and the port open?")
    accel = {k: v for k, v in resources.items() if k in ("GPU", "NPU")}
    msg = f"{address}: {len(nodes)} node(s) alive, resources {accel or 'no GPU/NPU'}"
    if len(nodes) < nnodes:
        return Check(FAIL, "ray", msg + f"; config asks for {nnodes} nodes -> join the missing nodes")
    return Check(OK, "ray", msg)


# ---------------------------------------------------------------- memory


def param_count(hf: dict[str, Any]) -> int:
    """Parameters of a dense decoder from its Hugging Face config (Qwen/Llama layout)."""
    text = hf.get("text_config") or hf
    h, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
    inter, vocab = int(text["intermediate_size"]), int(text["vocab_size"])
    heads = int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads") or heads)
    hd = int(text.get("head_dim") or h // heads)
    attn = h * heads * hd * 2 + h * kv * hd * 2  # q, o and k, v
    if text.get("attention_bias"):
        attn += heads * hd + 2 * kv * hd
    per_layer = attn + 3 * h * inter + 2 * h + 2 * hd  # gated MLP, two norms, q/k norms (Qwen3)
    embed = vocab * h * (1 if text.get("tie_word_embeddings", False) else 2)
    return layers * per_layer + embed + h


@dataclass
class MemoryEstimate:
    train_gb: dict[str, float]
    rollout_gb: dict[str, float] = field(default_factory=dict)
    vllm_needs_gb: float | None = None  # weights per TP rank + KV cache for one max-length sequence
    vllm_budget_gb: float | None = None

    @property
    def train_total(self) -> float:
        return sum(self.train_gb.values())

    @property
    def rollout_total(self) -> float:
        return sum(self.rollout_gb.values())


def estimate_memory(hf: dict[str, Any], *, world: int, tokens: int, grad_ckpt: bool, param_offload: bool,
                    optimizer_offload: bool, offload_policy: bool = False, fp32_master: bool = True,
                    rollout_util: float | None = None, rollout_tp: int = 1, max_model_len: int | None = None,
                    device_gb: float | None = None) -> MemoryEstimate:
    """A rough per-device peak under FSDP full sharding over ``world`` devices, in GiB.

    Training peak: sharded fp32 master weights, fp32 grads and Adam moments (verl's param/optimizer offload moves
    them to the host between phases but loads them back for the update; only FSDP2 ``offload_policy`` keeps them
    off the device), the unsharded bf16 embedding/largest layer, activations for ``tokens`` tokens per micro-batch
    on one device (all layer inputs with gradient checkpointing, else every layer's intermediates), bf16 logits
    and their gradient, and ~2 GiB of runtime. ``tokens`` is the worst case (every sequence at full length). Rollout peak (colocated vLLM): its ``rollout_util`` share of the
    device plus whatever training state stays resident (none with both offloads).
    """
    text = hf.get("text_config") or hf
    p = param_count(hf)
    h, layers, inter, vocab = (int(text[k]) for k in ("hidden_size", "num_hidden_layers", "intermediate_size",
                                                      "vocab_size"))
    heads = int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads") or heads)
    hd = int(text.get("head_dim") or h // heads)
    master = 4 if fp32_master else 2
    gb = 1 / GIB
    shard = 0.0 if offload_policy else 1.0
    train = {
        "weights": master * p / world * shard * gb,
        "grads": 4 * p / world * shard * gb,
        "optimizer": 8 * p / world * shard * gb,
        "gathered layer": 2 * 2 * max(vocab * h, 4 * h * h + 3 * h * inter) * gb,  # current + prefetched, bf16
        "activations": (layers * tokens * h * 2 + tokens * (16 * h + 4 * inter) * 2 if grad_ckpt
                        else layers * tokens * (16 * h + 4 * inter) * 2) * gb,
        "logits": tokens * vocab * (2 + 2) * gb,  # bf16 logits and their gradient (log-probs are chunked)
        "runtime": 2.0,
    }
    est = MemoryEstimate(train_gb=train)
    if rollout_util is not None and device_gb is not None:
        est.rollout_gb = {"vllm (gpu_memory_utilization)": rollout_util * device_gb}
        if not param_offload and not offload_policy:
            est.rollout_gb["resident weights"] = train["weights"]
        if not optimizer_offload and not offload_policy:
            est.rollout_gb["resident optimizer"] = train["optimizer"]
        est.vllm_budget_gb = rollout_util * device_gb
        kv_per_token = 2 * layers * kv * hd * 2  # K and V, bf16
        est.vllm_needs_gb = (2 * p / rollout_tp + kv_per_token * (max_model_len or 0) / rollout_tp) * gb + 1.0
    return est


def memory_inputs(cfg: dict[str, Any]) -> dict[str, Any]:
    """The estimator's keyword arguments from a resolved RL or SFT config."""
    world = int(dig(cfg, "trainer.nnodes", 1) or 1) * int(dig(cfg, "trainer.n_gpus_per_node", 1) or 1)
    if config_kind(cfg) == "rl":
        actor, rollout = dig(cfg, "actor_rollout_ref.actor", {}), dig(cfg, "actor_rollout_ref.rollout", {})
        fsdp = actor.get("fsdp_config", {}) or {}
        prompt = int(rollout.get("prompt_length") or dig(cfg, "data.max_prompt_length", 512))
        response = int(rollout.get("response_length") or dig(cfg, "data.max_response_length", 512))
        sp = int(actor.get("ulysses_sequence_parallel_size") or fsdp.get("ulysses_sequence_parallel_size") or 1)
        if actor.get("use_dynamic_bsz"):
            tokens = int(actor.get("ppo_max_token_len_per_gpu") or prompt + response)
        else:
            tokens = int(actor.get("ppo_micro_batch_size_per_gpu") or 1) * (prompt + response) // sp
        return dict(world=world, tokens=max(tokens, 1),
                    grad_ckpt=bool(dig(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing", True)),
                    param_offload=bool(fsdp.get("param_offload")), optimizer_offload=bool(fsdp.get("optimizer_offload")),
                    offload_policy=bool(fsdp.get("offload_policy")),
                    fp32_master=str(fsdp.get("model_dtype", "fp32")) in ("fp32", "float32"),
                    rollout_util=float(rollout.get("gpu_memory_utilization") or 0.5),
                    rollout_tp=int(rollout.get("tensor_model_parallel_size") or 1),
                    max_model_len=int(rollout.get("max_model_len") or prompt + response))
    engine, data = dig(cfg, "engine", {}) or {}, dig(cfg, "data", {}) or {}
    sp = int(engine.get("ulysses_sequence_parallel_size") or dig(cfg, "ulysses_sequence_parallel_size", 1) or 1)
    if data.get("use_dynamic_bsz", True):
        tokens = int(data.get("max_token_len_per_gpu") or data.get("max_length") or 1024)
    else:
        tokens = int(data.get("micro_batch_size_per_gpu") or 1) * int(data.get("max_length") or 1024) // sp
    return dict(world=world, tokens=max(tokens, 1),
                grad_ckpt=bool(dig(cfg, "model.enable_gradient_checkpointing", True)),
                param_offload=bool(engine.get("param_offload")), optimizer_offload=bool(engine.get("optimizer_offload")),
                offload_policy=bool(engine.get("offload_policy")),
                fp32_master=str(engine.get("model_dtype", "fp32")) in ("fp32", "float32"))


def model_shape(cfg: dict[str, Any], hf: dict[str, Any] | None,
                override: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """The model's config: ``override`` (a known name or a config.json path), the model folder, or a known name
    found in the model path."""
    if override:
        if override.lower() in KNOWN_MODELS:
            return KNOWN_MODELS[override.lower()], f"built-in {override.lower()} shape"
        path = Path(override)
        if path.is_dir():
            path = path / "config.json"
        try:
            return json.loads(path.read_text()), str(path)
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"--model-config {override}: neither a known model ({', '.join(KNOWN_MODELS)}) nor "
                              f"a readable config.json ({e})") from e
    if hf:
        return hf, "config.json"
    name = str(model_path(cfg) or "").lower()
    for key, shape in KNOWN_MODELS.items():
        if key in name.replace("_", "-"):
            return shape, f"built-in {key} shape"
    return None, ""


def check_memory(cfg: dict[str, Any], hf: dict[str, Any] | None, devices: Devices,
                 device_gb: float | None, model_config: str | None = None) -> Check:
    try:
        shape, source = model_shape(cfg, hf, model_config)
    except ConfigError as e:
        return Check(FAIL, "memory", str(e))
    if shape is None:
        return Check(SKIP, "memory", "model config unavailable (model folder missing): pass --model-config "
                                     f"{'|'.join(KNOWN_MODELS)} or a config.json")
    want_kind = dig(cfg, "trainer.device", devices.kind)
    if device_gb is None:
        if devices.kind == want_kind and devices.memory_gb:
            device_gb = devices.memory_gb
        else:
            device_gb = KNOWN_DEVICE_MEMORY_GB.get(want_kind)
    if device_gb is None:
        return Check(WARN, "memory", f"cannot tell the memory of a {want_kind} device here: pass --device-memory-gb")
    kwargs = memory_inputs(cfg)
    if want_kind == "cpu":
        kwargs["rollout_util"] = None  # vLLM-CPU takes VLLM_CPU_KVCACHE_SPACE GiB of host RAM instead
    est = estimate_memory(shape, device_gb=device_gb, **kwargs)
    parts = ", ".join(f"{k} {v:.1f}" for k, v in est.train_gb.items())
    total = est.train_total
    capacity = device_gb
    if want_kind == "cpu":
        total *= kwargs["world"]  # every CPU worker shares the host's RAM
    msg = (f"~{total:.1f} GiB per device for training ({parts}; up to {kwargs['tokens']} tokens per micro-batch, "
           f"{kwargs['world']} device(s), {source}) of {capacity:.0f} GiB")
    problems = []
    if total > capacity:
        problems.append("training does not fit: enable actor fsdp_config param_offload/optimizer_offload (or "
                        "offload_policy), raise ulysses_sequence_parallel_size, lower ppo_max_token_len_per_gpu / "
                        "micro batch, or use more devices")
    if est.rollout_gb:
        msg += f"; rollout phase ~{est.rollout_total:.1f} GiB"
        if est.rollout_total > capacity:
            problems.append("rollout phase does not fit: offload params/optimizer during rollout or lower "
                            "rollout.gpu_memory_utilization")
        if est.vllm_needs_gb and est.vllm_budget_gb and est.vllm_needs_gb > est.vllm_budget_gb:
            problems.append(f"vLLM needs ~{est.vllm_needs_gb:.1f} GiB for weights + one {kwargs['max_model_len']}-"
                            f"token sequence but gets {est.vllm_budget_gb:.1f}: raise gpu_memory_utilization or "
                            "tensor_model_parallel_size")
    if problems:
        return Check(WARN, "memory", msg + " -> " + "; ".join(problems))
    return Check(OK, "memory", msg + " (a rough estimate)")


# ---------------------------------------------------------------- main


def run_checks(args: argparse.Namespace) -> list[Check]:
    pins = load_pins()
    devices = detect_devices()
    checks = [check_python(pins)]
    cfg: dict[str, Any] | None = None
    config_check: Check | None = None
    if args.config is not None:
        try:
            cfg = load_config(args.config, args.override)
            kind = config_kind(cfg)
            config_check = Check(OK, "config", f"{args.config} resolves ({'RL' if kind == 'rl' else 'SFT'}, device "
                                               f"{dig(cfg, 'trainer.device', '?')}, {dig(cfg, 'trainer.nnodes', 1)} "
                                               f"node(s) x {dig(cfg, 'trainer.n_gpus_per_node', 1)})")
        except ConfigError as e:
            config_check = Check(FAIL, "config", f"{e}")
    extra = args.extra or (dig(cfg, "trainer.device") if cfg else None) or devices.kind
    checks.append(check_packages(pins, extra if extra in (pins.get("extras") or {}) else devices.kind))
    checks.append(check_patches())
    checks.append(check_devices(devices, cfg))
    sandbox_url = args.sandbox_url
    if config_check is not None:
        checks.append(config_check)
    if cfg is None:
        why = "pass --config" if args.config is None else "the config did not resolve"
        checks += [Check(SKIP, name, why) for name in ("model", "data", "tool config")]
        hf = None
    else:
        model_check, hf = check_model(cfg)
        checks += [model_check, check_data(cfg)]
        tool_check, tool_url = check_tool_config(cfg)
        checks.append(tool_check)
        if sandbox_url and tool_url and base_url(sandbox_url) != base_url(tool_url):
            checks.append(Check(WARN, "sandbox url", f"checking {base_url(sandbox_url)} but the tool config sends "
                                                     f"code to {tool_url}: set RETOOL_SANDBOX_URL (or --sandbox-url) "
                                                     "to the same server"))
        sandbox_url = sandbox_url or tool_url
    checks.append(check_sandbox(sandbox_url))
    checks.append(check_ray(args.ray_address or os.environ.get("RAY_ADDRESS"), cfg))
    if cfg is None:
        checks.append(Check(SKIP, "memory", "pass --config"))
    else:
        checks.append(check_memory(cfg, hf, devices, args.device_memory_gb, args.model_config))
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="retool-doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=None,
                        help="launcher .sh (run with DRY_RUN=1), resolved YAML, or recipe Hydra YAML")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Hydra override for --config (passed to a launcher as an argument); repeatable")
    parser.add_argument("--sandbox-url", default=None,
                        help="sandbox base or /run_code URL (default: the tool config's sandbox_fusion_url)")
    parser.add_argument("--ray-address", default=None, help="Ray cluster to check (default: $RAY_ADDRESS)")
    parser.add_argument("--extra", choices=["cpu", "cuda", "npu"], default=None,
                        help="which pinned extra to check (default: the config's trainer.device, else this host's)")
    parser.add_argument("--model-config", default=None,
                        help=f"model shape for the memory estimate when the model folder is elsewhere: "
                             f"{', '.join(KNOWN_MODELS)} or a config.json path")
    parser.add_argument("--device-memory-gb", type=float, default=None,
                        help="memory per device for the estimate (default: read from the device, 64 for an A3 die)")
    args = parser.parse_args(argv)
    checks = run_checks(args)
    for check in checks:
        print(check.line())
    counts = {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAIL, SKIP)}
    print(f"retool-doctor: {counts[OK]} ok, {counts[WARN]} warning(s), {counts[FAIL]} failure(s), "
          f"{counts[SKIP]} skipped")
    return 1 if counts[FAIL] else 0


if __name__ == "__main__":
    sys.exit(main())

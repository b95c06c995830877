"""Install the recipe into a vllm-ascend container image without ever replacing the image's device stack.

    python -m retool.npu_install [--dry-run] [--requirements FILE] [--no-verl] [--allow-missing] [REQUIREMENT ...]
    bash scripts/install_npu.sh [the same options]        # the same, with the image's python3, from any folder

The image brings torch, torch-npu, vllm and vllm-ascend as one set built for its CANN (the set this recipe expects:
[tool.retool.npu_image] in pyproject.toml). A torch that pip takes from PyPI does not match the image's torch-npu, and
vllm-ascend works only with the vllm it was built for, so pip must never replace any of the four:

1. the versions the image HAS are read and written to a constraints file (``torch==2.10.0+cpu``, ...);
2. requirements.txt (plus any REQUIREMENT given) is installed with ``pip install -c <that file>``, then the patched
   verl (``retool.verl_install``) with the same file in ``PIP_CONSTRAINT``;
3. the four versions are read again after each step; any change stops the install with a message.

A requirement that needs another version of one of the four makes pip's resolver fail before anything is installed,
and the message names the package and the image's version. ``--dry-run`` only resolves (``pip install --dry-run
--report``) and checks that the plan installs none of the four.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from retool.constants import REPO_ROOT

# pip distribution names of the image's device stack (retool-doctor compares the same four with the pins).
IMAGE_STACK = ("torch", "torch-npu", "vllm", "vllm-ascend")
DEFAULT_CONSTRAINTS = REPO_ROOT / ".cache" / "npu-image-constraints.txt"
_READ_VERSIONS = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        out[name] = None\n"
    "print(json.dumps(out))\n"
)


class StackGuardError(RuntimeError):
    """The install would change (or did change) the image's device stack, or could not run; the text says why."""


def canonical(name: str) -> str:
    """PEP 503 form of a distribution name (torch_npu, Torch-NPU -> torch-npu)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions(python: str) -> dict[str, str | None]:
    """{name: version or None} of IMAGE_STACK in ``python``'s environment, read in a fresh process (so what pip just
    changed is seen)."""
    proc = subprocess.run([python, "-c", _READ_VERSIONS, *IMAGE_STACK], capture_output=True, text=True)
    if proc.returncode != 0:
        raise StackGuardError(f"{python} could not report its packages: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def constraints_text(versions: dict[str, str | None]) -> str:
    """A pip constraints file pinning every installed package of the image's stack to the version it has."""
    lines = ["# The image's device stack, pinned as installed (retool/npu_install.py); pip must not replace it."]
    lines += [f"{name}=={version}" for name, version in versions.items() if version is not None]
    return "\n".join(lines) + "\n"


def changes(before: dict[str, str | None], after: dict[str, str | None]) -> list[str]:
    """'torch 2.10.0 -> 2.11.0' for every package of the stack whose version differs."""
    return [
        f"{name} {before.get(name) or '(absent)'} -> {after.get(name) or '(absent)'}"
        for name in IMAGE_STACK
        if before.get(name) != after.get(name)
    ]


def planned_changes(report: dict, before: dict[str, str | None]) -> list[str]:
    """The stack packages a ``pip install --report`` plan would install, as 'torch 2.10.0 -> 2.11.0'."""
    planned = []
    for item in report.get("install", []):
        metadata = item.get("metadata", {})
        name = canonical(metadata.get("name", ""))
        if name in IMAGE_STACK:
            planned.append(f"{name} {before.get(name) or '(absent)'} -> {metadata.get('version')}")
    return planned


def refusal(what: list[str], detail: str = "") -> StackGuardError:
    return StackGuardError(
        f"this would replace the image's device stack: {'; '.join(what)}. torch, torch-npu, vllm and vllm-ascend "
        "come from the container image as one set built for its CANN; nothing of them may come from pip. Drop the "
        "requirement that needs another version, or use an image that has it (pins: [tool.retool.npu_image] in "
        f"pyproject.toml; docs/install.md).{detail}"
    )


def pip_install(
    python: str,
    constraints: Path,
    requirements: Path | None,
    extra: list[str],
    dry_run: bool,
    before: dict[str, str | None],
) -> dict | None:
    """Run pip with the constraints; return the --report plan in dry-run mode. A resolver conflict on one of the
    stack packages becomes a refusal naming it."""
    cmd = [python, "-m", "pip", "install", "-c", str(constraints)]
    cmd += ["-r", str(requirements)] if requirements is not None else []
    cmd += extra
    report_file = None
    if dry_run:
        handle, name = tempfile.mkstemp(prefix="pip-report-", suffix=".json")
        os.close(handle)
        report_file = Path(name)
        cmd += ["--dry-run", "--quiet", "--report", str(report_file)]
    print(f"$ {' '.join(cmd)}", flush=True)
    try:
        _run_echoed(cmd, echo=not dry_run)
        return None if report_file is None else json.loads(report_file.read_text())
    except subprocess.CalledProcessError as exc:
        held = [name for name in IMAGE_STACK if _held_by_constraint(exc.output, name, before.get(name))]
        if held:
            stated = [f"{name} (the image has {before[name]})" for name in held]
            raise refusal(stated, f"\npip stopped before installing anything:\n{_conflict_lines(exc.output)}") from None
        raise StackGuardError(f"pip install failed (exit {exc.returncode}):\n{exc.output[-3000:]}") from None
    finally:
        if report_file is not None:
            report_file.unlink(missing_ok=True)


def _run_echoed(cmd: list[str], echo: bool) -> None:
    """Run ``cmd`` in the checkout, echoing its output as it comes when ``echo`` (a real install takes minutes);
    on failure raise CalledProcessError carrying the whole output (for the conflict check)."""
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if echo:
            print(line, end="", flush=True)
    if proc.wait() != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, output="".join(lines))


def _held_by_constraint(output: str, name: str, version: str | None) -> bool:
    """Whether pip's resolver output blames our pin of ``name`` (its line reads e.g. "The user requested
    (constraint) torch<=2.14.1,==2.13.0+cpu": pip merges every constraint on a name into one line)."""
    pattern = rf"\(constraint\)\s+{re.escape(name)}(?![\w-])\S*=={re.escape(version or '')}(?![\w.+])"
    return version is not None and re.search(pattern, output, re.I) is not None


def _conflict_lines(output: str) -> str:
    """pip's explanation of a resolver conflict (its 'conflict is caused by' block), else its last lines."""
    found = re.search(r"The conflict is caused by:\n(?:[ \t]+.*\n)+", output)
    return (found.group(0) if found else output[-1500:]).rstrip()


def install(
    python: str,
    requirements: Path | None,
    extra: list[str],
    constraints: Path,
    dry_run: bool,
    with_verl: bool,
    verl_source: str,
    allow_missing: bool,
) -> dict[str, str | None]:
    """The whole guarded install (module docstring). Returns the stack's versions, unchanged."""
    before = installed_versions(python)
    absent = [name for name, version in before.items() if version is None]
    if absent and not allow_missing:
        raise StackGuardError(
            f"{python} has no {', '.join(absent)}: this is not the vllm-ascend image's Python. Run this inside the "
            "container (docs/install.md) or set PYTHON to the image's interpreter; --allow-missing protects only "
            "what is installed"
        )
    constraints.parent.mkdir(parents=True, exist_ok=True)
    constraints.write_text(constraints_text(before))
    print(
        f"image stack (pinned in {constraints}): "
        + ", ".join(f"{name} {version or '(absent)'}" for name, version in before.items()),
        flush=True,
    )
    report = pip_install(python, constraints, requirements, extra, dry_run, before)
    if report is not None:
        planned = planned_changes(report, before)
        if planned:
            raise refusal(planned)
        names = sorted(
            f"{item['metadata']['name']} {item['metadata']['version']}" for item in report.get("install", [])
        )
        print(f"dry run: pip would install {len(names)} packages, none of the image's stack:\n  " + "\n  ".join(names))
        return before
    _verify(python, before, "pip install of the requirements")
    if with_verl:
        # pip reads PIP_CONSTRAINT as a space-separated list: the user's own constraints stay in force.
        env = {
            **os.environ,
            "PIP_CONSTRAINT": " ".join(filter(None, [os.environ.get("PIP_CONSTRAINT"), str(constraints)])),
        }
        cmd = [python, "-m", "retool.verl_install", "install", "--python", python, "--source", verl_source]
        print(f"$ PIP_CONSTRAINT='{env['PIP_CONSTRAINT']}' {' '.join(cmd)}", flush=True)
        if subprocess.run(cmd, cwd=REPO_ROOT, env=env).returncode != 0:
            raise StackGuardError("the verl install failed (its message is above); the image's stack was pinned")
        _verify(python, before, "the verl install")
    return before


def _verify(python: str, before: dict[str, str | None], step: str) -> None:
    changed = changes(before, installed_versions(python))
    if changed:
        raise StackGuardError(
            f"{step} changed the image's device stack: {'; '.join(changed)}. Start a fresh container from the image "
            "and report the requirement that pulled it in"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.npu_install", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "requirements_extra",
        nargs="*",
        metavar="REQUIREMENT",
        help="further requirements to install under the same guard",
    )
    parser.add_argument(
        "--requirements",
        type=Path,
        default=REPO_ROOT / "requirements.txt",
        help="requirements file (default: the checkout's requirements.txt)",
    )
    parser.add_argument("--no-requirements", action="store_true", help="install only the REQUIREMENTs given")
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose environment is installed into")
    parser.add_argument(
        "--constraints",
        type=Path,
        default=DEFAULT_CONSTRAINTS,
        help="where the constraints file is written (default: %(default)s)",
    )
    parser.add_argument("--dry-run", action="store_true", help="resolve only and show the plan (pip --dry-run)")
    parser.add_argument("--no-verl", action="store_true", help="skip the patched verl install")
    parser.add_argument("--verl-source", choices=("sdist", "git"), default="sdist")
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="protect only the stack packages that are installed (default: all four must be)",
    )
    args = parser.parse_args(argv)
    try:
        versions = install(
            args.python,
            None if args.no_requirements else args.requirements,
            args.requirements_extra,
            args.constraints,
            args.dry_run,
            not (args.no_verl or args.dry_run),
            args.verl_source,
            args.allow_missing,
        )
    except StackGuardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.dry_run:
        print(
            "done; the image's stack is unchanged: "
            + ", ".join(f"{name} {version}" for name, version in versions.items() if version)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The repository's shape, checked: small modules, one client of the /run_code protocol, an architecture page that
names only modules that exist, test files of distinct names."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from retool.constants import REPO_ROOT

MAX_MODULE_LINES = 550  # as `ruff format` writes them: a call too long for one line takes a line per argument
# Tests of the protocol itself, which write request bodies on purpose: as other clients send them (the PyPI
# sandbox-fusion client, verl's raw payload), malformed ones the server must reject, and bodies fed straight to the
# server's request parser.
PROTOCOL_TESTS = {"sandbox/tests/test_contract.py", "sandbox/tests/test_units.py"}


def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO_ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_of_the_package_is_over_550_lines():
    long = {
        str(p.relative_to(REPO_ROOT)): n
        for p in python_files("retool", "sandbox/retool_sandbox")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these modules (at most {MAX_MODULE_LINES} lines each): {long}"


def request_builders(path: Path) -> list[int]:
    """Lines where ``path`` writes a /run_code request body: a dict literal with "code" and "language" keys."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"code", "language"} <= keys:
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and "language" in {k.arg for k in node.keywords}
            and ("code" in {k.arg for k in node.keywords} or node.args)
        ):
            lines.append(node.lineno)
    return lines


def test_exactly_one_module_builds_run_code_requests():
    builders = {
        str(p.relative_to(REPO_ROOT)): lines
        for p in python_files("retool", "sandbox", "bench", "tests", "scripts")
        if (lines := request_builders(p))
    }
    assert "sandbox/retool_sandbox/client.py" in builders, "the client no longer builds the request: this test is stale"
    others = {
        path: lines
        for path, lines in builders.items()
        if path != "sandbox/retool_sandbox/client.py" and path not in PROTOCOL_TESTS
    }
    assert not others, f"build /run_code requests with retool_sandbox.client instead: {others}"


def test_the_rule_catches_a_hand_made_request(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text('import json\nbody = json.dumps({"code": "print(1)", "language": "python"})\n')
    assert request_builders(sample) == [2]


def test_every_module_the_architecture_page_names_exists():
    page = (REPO_ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"\b(retool(?:/[\w]+)*\.py|retool(?:\.\w+)+)\b", page))
    assert len(named) >= 20, f"docs/architecture.md names only {len(named)} modules: is it the module map?"
    missing = []
    for name in sorted(named):
        path = REPO_ROOT / (name if name.endswith(".py") else name.replace(".", "/"))
        candidates = [path] if name.endswith(".py") else [path.with_suffix(".py"), path / "__init__.py"]
        if not any(c.is_file() for c in candidates):
            # a dotted name may end in an attribute of its module (retool.tool.CodeInterpreterTool)
            module = REPO_ROOT / (name.rsplit(".", 1)[0].replace(".", "/"))
            if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
                missing.append(name)
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
    assert page.count("```mermaid") >= 2, "the page needs its data-flow and module-layout diagrams"


def test_no_two_test_files_share_a_name():
    # tests/ has no __init__.py files, so pytest imports each test file by its bare name: two files of one name in
    # different folders stop `make test` at collection (each folder alone still runs)
    names = Counter(
        path.name for folder in ("tests", "sandbox/tests") for path in (REPO_ROOT / folder).rglob("test_*.py")
    )
    assert not [name for name, n in names.items() if n > 1], names

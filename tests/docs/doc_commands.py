"""Check that the commands README.md and docs/ show (English and Chinese pages) can run in this repository.

What is read: every fenced block tagged ``bash``, ``sh``, ``shell``, ``zsh`` or ``console`` (there only the ``$ ``
lines), and every inline code span outside fences that holds a command of this project. Commands are split as
bash splits them (shell_words.py): ``\\`` continuations, comments, ``&&``/``;``/``|`` chains, ``VAR=value``
prefixes and ``export VAR=value`` lines (they hold for the rest of the block). Every command is taken to run at the
repository root. An untagged fence whose commands belong to this project is reported: tag it.

Commands of this project and what is checked:
- console scripts (pyproject [project.scripts]), ``python -m retool...``, ``python <script of the repository>`` and
  a shell script of the repository that hands its arguments to a module (``bash scripts/install_npu.sh`` runs
  ``python -m retool.npu_install "$@"``): the options, subcommands and choice/int/float values against the command's
  own argparse parser, taken without running the command (cli_parsers.py).
- launchers (``./run_*.sh``, ``scripts/launch.sh``): run with ``DRY_RUN=1``, ``PYTHON`` = this interpreter and the
  command's environment assignments; a non-zero exit (Hydra rejects an unknown key, a ``+`` on an existing key, ...)
  is a problem, and so is a ``key=value`` override whose value does not reach the resolved config. One run per
  distinct (launcher, environment, overrides). A placeholder (``<n>``, ``...``) in a launcher command is a problem.
- ``make <target>``: the target exists in the Makefile.
- paths, in the arguments of every command read (also other tools' commands, and ``--flag=path`` or ``key=path``
  values): a relative path whose first part is a file or folder of the repository (bench/, configs/, docs/,
  retool/, scripts/, tests/, run_*.sh, ...) must exist (globs must match, ``{a,b}`` is expanded); so must a bare
  ``*.sh`` name. Paths under runs/, data/, checkpoints/, report/, .cache/, .venv/ and outputs/ are what commands
  create or the user provides, and absolute paths, ``~``, ``$VAR`` and ``<placeholder>`` paths are the reader's:
  none of them is checked. A first part one letter away from a repository folder (config/ for configs/) is a
  problem; any other relative path (a hub id such as Qwen/Qwen3-4B-Instruct-2507) is not checked.

Quoted numbers: a figure that a page quotes from a generated section of another page (``<!-- NAME:start -->`` ...
``<!-- NAME:end -->``, retool/markdown_sections.py) is followed by a marker naming its source,
``took 14.4 min<!-- from docs/performance.md#smoke-avx2-only-emulated-float32 -->`` (path from the repository root).
The last number before the marker on its line must equal a number of that section, after rounding the section's
number to the quoted decimals (1.2 quotes 1.21; signs are ignored).

Nothing but the launchers' dry runs is ever executed, so a block written for another machine (an NPU node, a host
that reaches the Hugging Face hub) is checked like any other. Its launcher calls may need values only that machine
gives: ``<!-- docs-check: elsewhere (reason) -->`` on the line right before the opening fence (or before the line
with inline commands) lets a launcher's environment hold a placeholder (``MODEL_PATH=<the path the SFT stage
printed>``), which is then left out of the dry run (the launcher's own DRY_RUN stand-in is used); every argument is
still checked. ``<!-- docs-check: skip (reason) -->`` skips a block of other tools' commands (``docker run ...``);
on a block that holds a command of this project it is a problem (use ``elsewhere``: its arguments are still
checked). A marker without a reason, or one that marks nothing, is a problem.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tomllib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import NamedTuple

import yaml

from cli_parsers import NoParser, argument_problems, entry_point_parser, is_placeholder, module_parser, script_parser
from doc_pages import ELSEWHERE, SHELL_LANGS, SKIP, Page, Quote, Span, console_commands, read_page
from retool.markdown_sections import markers as section_markers
from shell_words import SimpleCommand, simple_commands

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = {"runs", "data", "checkpoints", "report", ".cache", ".venv", "outputs"}
PROJECT_KINDS = {"console", "module", "script", "launcher", "make"}
PATH_WORD = re.compile(r"[\w.+@%-][\w.+@%*?{},\[\]/-]*")
OVERRIDE = re.compile(r"(?P<prefix>[+~]{0,2})(?P<key>[A-Za-z_][\w.@-]*)=(?P<value>.*)")
PYTHON = re.compile(r"(.*/)?python(3(\.\d+)?)?|\"?\$\{?PYTHON\}?\"?")
LAUNCHER = re.compile(r"\./run_\w+\.sh|(\./)?scripts/launch\.sh")
COMMON_TOOLS = {
    "python",
    "python3",
    "pip",
    "pytest",
    "curl",
    "git",
    "bash",
    "sh",
    "tensorboard",
    "ray",
    "flock",
    "cd",
    "ls",
    "cat",
    "export",
    "torchrun",
}
WRAPPERS = {"sudo", "time", "nohup", "exec", "env"}
# A repository shell script that hands its arguments to a module: `exec "$PYTHON" -m retool.npu_install "$@"`.
HANDS_OVER = re.compile(r"^\s*(?:exec\s+)?\S+\s+-m\s+(retool(?:\.\w+)*)\b[^\n]*\"\$@\"", re.M)
FIGURE = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w]|\.\d)")
_DRY_RUNS: dict[tuple, subprocess.CompletedProcess] = {}  # one run per distinct launcher call, for the session


class Problem(NamedTuple):
    """What a reader following the docs would hit, where: shown as ``page:line: message``."""

    page: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.message}"


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        c = self.counts
        commands = c["console"] + c["launcher"] + c["make"] + c["other"]
        return (
            f"docs-check: {commands} commands checked in {c['pages']} pages ({c['console']} console-script "
            f"calls, {c['launcher']} launcher dry-runs in {c['runs']} runs, {c['make']} make targets, "
            f"{c['other']} other tools' commands for their paths); {c['paths']} repository paths and "
            f"{c['numbers']} quoted numbers checked; {c['elsewhere']} blocks for another machine checked "
            f"without their placeholders, {c['skipped']} blocks of other tools marked skip"
        )


class Project:
    """What the repository offers: console scripts, top-level files and folders, make targets."""

    def __init__(self, repo: Path = REPO):
        self.repo = repo
        # the recipe's console scripts and those of the sandbox, its own distribution in sandbox/ (retool-sandbox)
        self.scripts = {
            name: script
            for pyproject in (repo / "pyproject.toml", repo / "sandbox" / "pyproject.toml")
            for name, script in tomllib.loads(pyproject.read_text())["project"]["scripts"].items()
        }
        listed = subprocess.run(
            ["git", "-C", str(repo), "ls-files", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            text=True,
        )
        names = listed.stdout.split() if listed.returncode == 0 else [p.name for p in repo.iterdir()]
        self.top = {n.split("/")[0] for n in names} - OUTPUTS
        makefile = (repo / "Makefile").read_text()
        self.make_targets = {t for m in re.finditer(r"^([\w.\- ]+):(?!=)", makefile, re.M) for t in m[1].split()}

    def classify(self, words: tuple[str, ...]) -> tuple[str, str, tuple[str, ...]]:
        """(kind, what, arguments) of a command: console, module, script, launcher, make or other."""
        while words and words[0] in WRAPPERS | {"flock"}:
            wrapper, words = words[0], words[1:]
            while words and (words[0].startswith("-") or "=" in words[0]):
                words = words[1:]
            words = words[1:] if wrapper == "flock" else words  # flock's lock file
        if not words:
            return "other", "", ()
        head, args = words[0], words[1:]
        if head in self.scripts:
            return "console", head, args
        if head in ("bash", "sh") and args and LAUNCHER.fullmatch(f"./{args[0].removeprefix('./')}"):
            head, args = f"./{args[0].removeprefix('./')}", args[1:]
        if LAUNCHER.fullmatch(head):
            return "launcher", head.removeprefix("./"), args
        script = (args[0] if head in ("bash", "sh") and args else head).removeprefix("./")
        if script.endswith(".sh") and (self.repo / script).is_file():
            module = HANDS_OVER.search((self.repo / script).read_text())
            if module:
                return "module", module[1], args[1:] if head in ("bash", "sh") else args
        if head == "make":
            return "make", "make", args
        if PYTHON.fullmatch(head) and args:
            if args[0] == "-m" and len(args) > 1 and re.fullmatch(r"retool(\.\w+)*", args[1]):
                return "module", args[1], args[2:]
            script = args[0].removeprefix("./")
            if script.endswith(".py") and (self.repo / script).is_file() and script.split("/")[0] in self.top:
                return "script", script, args[1:]
        return "other", head, args

    def is_project_command(self, command: SimpleCommand) -> bool:
        return self.classify(command.words)[0] in PROJECT_KINDS

    def path_problem(self, path: str) -> tuple[bool, str | None]:
        """(checked, problem) for one path-like word, by the rules of the module docstring."""
        path = path.removeprefix("./")
        first = path.split("/")[0]
        if first in OUTPUTS or first in ("", ".", "..") or is_placeholder(path.replace("*", "")):
            return False, None
        if first in self.top or ("/" not in path and path.endswith(".sh")):
            missing = [
                p
                for p in _braces(path)
                if not (any(self.repo.glob(p)) if re.search(r"[*?\[]", p) else (self.repo / p).exists())
            ]
            return True, (f"{', '.join(missing)} does not exist in the repository" if missing else None)
        near = difflib.get_close_matches(first, sorted(self.top), n=1, cutoff=0.8)
        if near and "/" in path:
            return True, f"{path}: the repository has no {first}/ (did you mean {near[0]}/?)"
        return False, None


def _is_tool(command: SimpleCommand) -> bool:
    """A command of a common tool (what makes an untagged block a command block, not a diagram)."""
    head = command.words[0] if command.words else ""
    return head.startswith((".venv/bin/", "./")) or head in COMMON_TOOLS


def _is_override_line(command: SimpleCommand) -> bool:
    return (
        not command.env
        and len(command.words) == 1
        and "." in command.words[0].partition("=")[0]
        and bool(OVERRIDE.fullmatch(command.words[0]))
    )


def _braces(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*,[^{}]*)\}", path)
    if not match:
        return [path]
    return [p for alt in match[1].split(",") for p in _braces(path[: match.start()] + alt + path[match.end() :])]


def _path_words(words: tuple[str, ...]) -> list[str]:
    paths = []
    for word in words:
        value = word.partition("=")[2] if "=" in word else word
        if word.startswith("-") and "=" not in word:
            continue
        if PATH_WORD.fullmatch(value) and ("/" in value or value.endswith(".sh")):
            paths.append(value)
    return paths


def load_pages(root: Path, names: list[str]) -> list[Page]:
    return [read_page(root / name, name) for name in names]


def command_spans(page: Page, project: Project) -> list[tuple[Span, list[SimpleCommand]]]:
    """Inline code spans that hold a command of this project, with their commands. A span of one word
    (`retool-eval`, `./run_smoke_cpu.sh`) names a command rather than showing one: it is not read."""
    found = []
    for span in page.spans:
        commands = simple_commands(span.text)
        if any(project.is_project_command(c) and len(c.env) + len(c.words) > 1 for c in commands):
            found.append((span, commands))
    return found


class _Checker:
    def __init__(self, project: Project):
        self.project = project
        self.report = Report()
        self.dry_runs: list[tuple[str, int, tuple, tuple[str, ...]]] = []  # page, line, key, overrides

    def problem(self, page: Page, line: int, message: str) -> None:
        self.report.problems.append(Problem(page.name, line, message))

    def page(self, page: Page) -> None:
        self.report.counts["pages"] += 1
        spans = command_spans(page, self.project)
        marked = self.marked_lines(page, spans)
        for block in page.blocks:
            commands = simple_commands(console_commands(block))
            if marked.get(block.line) == SKIP:
                if any(self.project.is_project_command(c) for c in commands):
                    self.problem(
                        page,
                        block.line - 1,
                        "a skip marker hides commands of this project: mark the block "
                        "<!-- docs-check: elsewhere (reason) --> so their arguments "
                        "are still checked",
                    )
                continue
            if block.lang == "" and any(self.project.is_project_command(c) or _is_tool(c) for c in commands):
                self.problem(page, block.line, "an untagged fenced block holds commands: tag it ```bash")
            elif block.lang == "" and commands and all(_is_override_line(c) for c in commands):
                self.problem(
                    page,
                    block.line,
                    "a block of bare Hydra overrides is not checked: show them on a "
                    "launcher command in a ```bash block (DRY_RUN=1 ./run_... key=value)",
                )
            if block.lang in SHELL_LANGS:
                self.commands(page, commands, block.first_line - 1, marked.get(block.line) == ELSEWHERE)
        for span, commands in spans:
            if marked.get(span.line) != SKIP:
                self.commands(page, commands, span.line - 1, marked.get(span.line) == ELSEWHERE)
        for quote in page.quotes:
            self.quoted_number(page, quote)

    def marked_lines(self, page: Page, spans: list) -> dict[int, str]:
        """{line of a block's fence or of inline commands: the kind of the valid marker before it}; bad markers
        become problems."""
        fences = {b.line for b in page.blocks}
        command_lines = {span.line for span, _ in spans}
        marked = {}
        for marker in page.markers:
            if marker.reason is None:
                self.problem(
                    page,
                    marker.line,
                    f"a docs-check marker without a reason, or misspelt: {marker.text} "
                    "(write <!-- docs-check: elsewhere (the machine it needs) --> or "
                    "<!-- docs-check: skip (why it cannot be checked) -->)",
                )
            elif marker.line + 1 in fences or marker.line + 1 in command_lines:
                marked[marker.line + 1] = marker.kind
                self.report.counts["skipped" if marker.kind == SKIP else "elsewhere"] += 1
            else:
                self.problem(
                    page,
                    marker.line,
                    f"{marker.kind} marker marks nothing: put it on the line right before "
                    "the opening fence or the line with the inline command",
                )
        return marked

    def commands(self, page: Page, commands: list[SimpleCommand], offset: int, elsewhere: bool = False) -> None:
        env: dict[str, str] = {}
        for command in commands:
            line = offset + command.line  # an inline span is one line: its commands are on line 1
            words = command.words
            if not words or words[0] == "export":
                env.update(command.env)
                env.update(w.split("=", 1) for w in words[1:] if "=" in w)
                continue
            kind, what, args = self.project.classify(words)
            paths = 0
            for path in _path_words(command.words + tuple(v for _, v in command.env)):
                checked, problem = self.project.path_problem(path)
                paths += checked
                if problem:
                    self.problem(page, line, problem)
            self.report.counts["paths"] += paths
            if kind in PROJECT_KINDS or paths:  # another tool's command counts when it names repository paths
                self.report.counts["console" if kind in ("console", "module", "script") else kind] += 1
            if kind in ("console", "module", "script"):
                self.arguments(page, line, kind, what, args)
            elif kind == "launcher":
                self.launcher(page, line, what, {**env, **dict(command.env)}, args, elsewhere)
            elif kind == "make":
                for target in (a for a in args if not a.startswith("-") and "=" not in a):
                    if target not in self.project.make_targets:
                        self.problem(page, line, f"make: the Makefile has no target {target!r}")

    def arguments(self, page: Page, line: int, kind: str, what: str, args: tuple[str, ...]) -> None:
        try:
            if kind == "console":
                parser = entry_point_parser(self.project.scripts[what])
            elif kind == "module":
                parser = module_parser(what)
            else:
                parser = script_parser(self.project.repo / what)
        except NoParser as exc:
            self.problem(page, line, f"{what}: {exc}")
            return
        for message in argument_problems(parser, args):
            self.problem(page, line, message)

    def launcher(
        self, page: Page, line: int, launcher: str, env: dict[str, str], args: tuple[str, ...], elsewhere: bool = False
    ) -> None:
        env = {k: v for k, v in env.items() if k not in ("DRY_RUN", "PYTHON")}
        if elsewhere:  # a value only the other machine gives: the launcher's DRY_RUN stand-in takes its place
            env = {k: v for k, v in env.items() if not is_placeholder(v)}
        unknown = [w for w in (*args, *env.values()) if "<" in w or "..." in w]
        if unknown:
            self.problem(
                page,
                line,
                f"{launcher}: placeholder {unknown[0]!r} cannot be dry-run: give a real value "
                "or mark the block <!-- docs-check: skip (reason) -->",
            )
            return
        overrides = args[1:] if launcher == "scripts/launch.sh" else args
        self.dry_runs.append((page.name, line, (launcher, tuple(sorted(env.items())), args), overrides))

    def run_launchers(self) -> None:
        keys = sorted({key for _, _, key, _ in self.dry_runs} - set(_DRY_RUNS))
        with ThreadPoolExecutor(max_workers=2) as pool:
            for key, proc in zip(keys, pool.map(lambda k: _dry_run(self.project.repo, *k), keys)):
                _DRY_RUNS[key] = proc
        self.report.counts["runs"] += len({key for _, _, key, _ in self.dry_runs})
        for name, line, key, overrides in self.dry_runs:
            proc = _DRY_RUNS[key]
            command = " ".join([*(f"{k}={v}" for k, v in key[1]), f"DRY_RUN=1 ./{key[0]}", *key[2]])
            if proc.returncode != 0:
                self.report.problems.append(
                    Problem(name, line, f"{command} exited {proc.returncode}: {_error_lines(proc.stderr)}")
                )
                continue
            for message in unapplied_overrides(self.project.repo, overrides, proc.stdout):
                self.report.problems.append(Problem(name, line, f"{command}: {message}"))

    def quoted_number(self, page: Page, quote: Quote) -> None:
        self.report.counts["numbers"] += 1
        source = self.project.repo / quote.file
        start, end = section_markers(quote.section)
        text = source.read_text() if source.is_file() else ""
        if not source.is_file():
            self.problem(page, quote.line, f"quoted number: no file {quote.file} (name it from the repository root)")
        elif start not in text or end not in text:
            self.problem(page, quote.line, f"quoted number: {quote.file} has no section {quote.section}")
        elif quote.number is None:
            self.problem(page, quote.line, f"quote marker of {quote.file}#{quote.section} follows no number")
        else:
            section = text.split(start, 1)[1].split(end, 1)[0]
            quoted = Decimal(quote.number.lstrip("+-").replace(",", ""))
            step = Decimal(1).scaleb(quoted.as_tuple().exponent)
            found = {Decimal(n.replace(",", "")) for n in FIGURE.findall(section)}
            if not any(n.quantize(step, rounding=ROUND_HALF_UP) == quoted for n in found):
                self.problem(page, quote.line, f"quoted number {quote.number} is not in {quote.file}#{quote.section}")


def _dry_run(repo: Path, launcher: str, env: tuple, args: tuple[str, ...]) -> subprocess.CompletedProcess:
    base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER") if k in os.environ}
    full_env = {**base, **dict(env), "DRY_RUN": "1", "PYTHON": sys.executable}
    return subprocess.run(
        [str(repo / launcher), *args], cwd=repo, env=full_env, capture_output=True, text=True, timeout=900
    )


def _error_lines(stderr: str) -> str:
    """The launcher's error without its DRY_RUN warnings and Hydra's boilerplate."""
    lines = [
        ln.strip()
        for ln in stderr.splitlines()
        if ln.strip() and not ln.lower().startswith("warning") and "HYDRA_FULL_ERROR" not in ln
    ]
    return " | ".join(lines[-3:]) or "(no error text)"


def unapplied_overrides(repo: Path, overrides: tuple[str, ...], stdout: str) -> list[str]:
    """Overrides whose value is not what the printed (last) resolved config holds at their key (config-group
    choices such as +smoke=rl select a file of configs/ and are left to Hydra)."""
    config = yaml.safe_load(re.split(r"^# ----.*$", stdout, flags=re.M)[-1]) or {}
    problems = []
    for override in overrides:
        match = OVERRIDE.fullmatch(override)
        if (
            not match
            or "~" in match["prefix"]
            or re.search(r"[${}\[\],'\"<]", match["value"])
            or (repo / "configs" / match["key"].replace(".", "/")).is_dir()
        ):
            continue  # config-group choices, deletions, interpolations and lists are Hydra's to judge
        node = config
        for part in match["key"].split("."):
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        wanted = yaml.safe_load(match["value"]) if match["value"] else None
        if node is KeyError or (node != wanted and str(node) != match["value"]):
            shown = "nothing" if node is KeyError else repr(node)
            problems.append(f"override {override} did not reach the resolved config (it holds {shown})")
    return problems


def check_docs(pages: list[Page], project: Project) -> Report:
    checker = _Checker(project)
    for page in pages:
        checker.page(page)
    checker.run_launchers()
    return checker.report

"""SandboxFusion's ``/run_code`` protocol as this server reads and answers it.

``parse_run_request`` validates a request body into a ``RunSpec`` (timeouts and memory clamped to the server's
maxima; ``RequestError`` names the offending field, answered as HTTP 422 with a FastAPI-style ``detail``);
``parse_session_id`` reads retool-sandbox's optional ``session_id``; ``run_response`` is SandboxFusion's
RunCodeResponse for one outcome, plus a ``session`` field ``{"id", "cell", "lost"}`` for session cells.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING, Any

from retool_sandbox.executor import RunOutcome, RunSpec, validate_paths

if TYPE_CHECKING:
    from retool_sandbox.config import ServerConfig

# The language names SandboxFusion accepts; anything else is a 422 there too.
SANDBOXFUSION_LANGUAGES = frozenset(
    "python python2 cpp nodejs go go_test java php csharp bash typescript sql rust cuda lua R perl D_ut ruby scala "
    "julia pytest junit kotlin_script jest verilog python_gpu lean swift racket gtest react".split()
)


class RequestError(ValueError):
    """An invalid /run_code body; ``loc`` names the field."""

    def __init__(self, loc: str, msg: str) -> None:
        super().__init__(f"{loc}: {msg}")
        self.loc, self.msg = loc, msg


def _number(body: dict, key: str, default: float | None) -> float | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(key, f"must be a number, got {value!r}")
    return float(value)


def parse_run_request(body: Any, cfg: ServerConfig) -> RunSpec:
    """Validate a /run_code body into a RunSpec (timeouts and memory clamped to the server's maxima)."""
    if not isinstance(body, dict):
        raise RequestError("body", "must be a JSON object")
    for key in ("code", "language"):
        if key not in body:
            raise RequestError(key, "field required")
        if not isinstance(body[key], str):
            raise RequestError(key, f"must be a string, got {type(body[key]).__name__}")
    language = body["language"]
    if language != "python":
        known = "a SandboxFusion language" if language in SANDBOXFUSION_LANGUAGES else "not a SandboxFusion language"
        raise RequestError("language", f"{language!r} ({known}) is not supported; this server runs only 'python'")
    timeout = _number(body, "run_timeout", cfg.default_timeout)
    if timeout <= 0:
        raise RequestError("run_timeout", f"must be > 0 seconds, got {timeout}")
    timeout = min(timeout, cfg.max_timeout)
    _number(body, "compile_timeout", None)
    memory = _number(body, "memory_limit_MB", -1)
    cap = cfg.max_memory_mb or None
    memory_mb = cap if memory <= 0 else (int(memory) if cap is None else min(int(memory), cap))
    stdin = body.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise RequestError("stdin", "must be a string or null")
    files_in = body.get("files")
    files_in = {} if files_in is None else files_in
    if not isinstance(files_in, dict):
        raise RequestError("files", "must be an object mapping path -> base64 content")
    files = {}
    for path, content in files_in.items():
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise RequestError(f"files.{path}", "content must be a base64 string")
        try:
            files[path] = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RequestError(f"files.{path}", f"content is not valid base64 ({exc})") from None
    fetch = body.get("fetch_files")
    fetch = [] if fetch is None else fetch
    if not isinstance(fetch, list) or not all(isinstance(p, str) for p in fetch):
        raise RequestError("fetch_files", "must be a list of path strings")
    try:
        files, fetch_paths = validate_paths(files, fetch)
    except ValueError as exc:
        loc, _, msg = str(exc).partition(": ")
        raise RequestError(loc, msg) from None
    return RunSpec(
        code=body["code"],
        timeout_s=timeout,
        memory_mb=memory_mb,
        stdin=None if stdin is None else stdin.encode("utf-8", "surrogatepass"),
        files=files,
        fetch_files=fetch_paths,
    )


SESSION_ID = re.compile(r"[A-Za-z0-9._:@+=-]{1,200}")


def parse_session_id(body: Any) -> str | None:
    """The optional ``session_id`` of a /run_code body (None or absent: a stateless run)."""
    value = body.get("session_id") if isinstance(body, dict) else None
    if value is None:
        return None
    if not isinstance(value, str) or not SESSION_ID.fullmatch(value):
        raise RequestError(
            "session_id",
            "must be 1-200 characters of letters, digits and ._:@+=- (or null for a "
            f"stateless run), got {str(value)[:80]!r}",
        )
    return value


def run_response(outcome: RunOutcome) -> dict[str, Any]:
    """SandboxFusion's RunCodeResponse for one run."""
    run_result = {
        "status": outcome.status,
        "execution_time": outcome.execution_time if outcome.status != "Error" else None,
        "return_code": outcome.return_code if outcome.status == "Finished" else None,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
    }
    if outcome.status == "Error":
        status = "SandboxError"
    elif outcome.status == "Finished" and outcome.return_code == 0:
        status = "Success"
    else:
        status = "Failed"
    response = {
        "status": status,
        "message": outcome.error,
        "compile_result": None,
        "run_result": run_result,
        "executor_pod_name": None,
        "files": outcome.files,
    }
    if outcome.session is not None:  # an extra field, only for requests that sent a session_id
        response["session"] = outcome.session
    return response

"""The code_interpreter schema a tool YAML shows the model, read without verl: SFT rows carry it (retool.data.sft)
and the profiles check data against it (retool.profiles), so RL rollouts and SFT data agree on one schema text."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from retool.constants import TOOL_NAME

OWN_TOOL_CLASS = "retool.tool.CodeInterpreterTool"


class ToolConfigError(ValueError):
    """The tool YAML is missing or has no usable code_interpreter schema."""


def load_tool_schema(tool_config: str | Path) -> dict[str, Any]:
    """The OpenAI function schema of `code_interpreter` that verl will show the model for this tool YAML
    (`tools: [{class_name, config, tool_schema?}]`), canonicalised by `canonical_tool_schema`.

    An entry whose `tool_schema.function.name` is code_interpreter wins. Otherwise an entry of class
    `retool.tool.CodeInterpreterTool` without `tool_schema` counts: verl then asks the tool, which answers with
    `retool.tool_schema.tool_schema(behaviour, session_mode)` of its `config:`. Raises ToolConfigError naming the file
    and key."""
    path = Path(tool_config)
    if not path.is_file():
        raise ToolConfigError(
            f"tool config {path} not found; pass --tool-config with the tool YAML (configs/tool.yaml)"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ToolConfigError(f"{path}: invalid YAML ({exc})") from exc
    tools = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(tools, list):
        raise ToolConfigError(f"{path}: expected a top-level `tools:` list of {{class_name, config, tool_schema}}")
    names = []
    for number, entry in enumerate(tools):
        schema = entry.get("tool_schema") if isinstance(entry, dict) else None
        function = schema.get("function") if isinstance(schema, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        names.append(name)
        if name == TOOL_NAME:
            return canonical_tool_schema(schema, where=f"{path}: tools[{number}].tool_schema")
    for number, entry in enumerate(tools):
        if isinstance(entry, dict) and entry.get("class_name") == OWN_TOOL_CLASS and entry.get("tool_schema") is None:
            from retool.tool_schema import tool_schema  # light modules (no verl), owned by the tool
            from retool.tool_settings import ToolSettings

            config = entry.get("config") if isinstance(entry.get("config"), dict) else {}
            try:
                schema = tool_schema(
                    config.get("behaviour", ToolSettings.behaviour),
                    config.get("session_mode", ToolSettings.session_mode),
                )
            except ValueError as exc:
                raise ToolConfigError(f"{path}: tools[{number}].config: {exc}") from None
            return canonical_tool_schema(schema, where=f"{path}: tools[{number}] (retool.tool_schema)")
    raise ToolConfigError(
        f"{path}: no entry has tool_schema.function.name == {TOOL_NAME!r} (names found: {names}) "
        f"and no {OWN_TOOL_CLASS} entry without tool_schema"
    )


def canonical_tool_schema(schema: Mapping[str, Any], where: str = "tool_schema") -> dict[str, Any]:
    """Check a code_interpreter schema and return it with verl's key set and order.

    verl validates tool schemas into pydantic models and renders `model_dump(exclude_unset=True, exclude_none=True)`;
    keys those models do not define are dropped there, so they are dropped here too, and the kept keys follow the
    models' field order. The result is JSON-compatible."""

    def pick(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
        return {key: source[key] for key in keys if source.get(key) is not None}

    def need(condition: bool, what: str) -> None:
        if not condition:
            raise ToolConfigError(f"{where}: {what}")

    need(isinstance(schema, Mapping) and schema.get("type") == "function", "`type` must be 'function'")
    function = schema.get("function")
    need(isinstance(function, Mapping), "`function` must be a mapping")
    need(function.get("name") == TOOL_NAME, f"`function.name` must be {TOOL_NAME!r}")
    need(isinstance(function.get("description"), str), "`function.description` must be a string")
    parameters = function.get("parameters")
    need(
        isinstance(parameters, Mapping) and parameters.get("type") == "object",
        "`function.parameters.type` must be 'object'",
    )
    properties = parameters.get("properties")
    need(isinstance(properties, Mapping), "`function.parameters.properties` must be a mapping")
    need(
        isinstance(properties.get("code"), Mapping) and properties["code"].get("type") == "string",
        "`function.parameters.properties.code.type` must be 'string'",
    )
    need("code" in (parameters.get("required") or []), "`function.parameters.required` must list 'code'")
    for name, prop in properties.items():
        need(isinstance(prop, Mapping) and "type" in prop, f"property {name!r} needs a `type`")

    canonical_parameters = pick(parameters, ("type",))
    canonical_parameters["properties"] = {
        name: pick(prop, ("type", "description", "enum")) for name, prop in properties.items()
    }
    if parameters.get("required") is not None:
        canonical_parameters["required"] = list(parameters["required"])
    canonical_function = pick(function, ("name", "description"))
    canonical_function["parameters"] = canonical_parameters
    canonical_function.update(pick(function, ("strict",)))
    # A JSON round trip turns YAML-specific scalars into plain JSON types.
    return json.loads(json.dumps({"type": "function", "function": canonical_function}))

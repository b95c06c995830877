"""ReTool recipe: the pieces verl plugs in (tool, reward, data), an embedded code sandbox, and run tooling."""

__version__ = "0.1.0"

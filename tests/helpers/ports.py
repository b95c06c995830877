"""A free TCP port on 127.0.0.1, for a server a test starts, or for a URL nothing listens on."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just handed out and released: free now, and nothing listens on it until a test binds it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

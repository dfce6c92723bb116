"""nanomem: a personal chat-agent runtime that remembers."""

__version__ = "0.1.0"

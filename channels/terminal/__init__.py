"""The terminal channel: a chat in the terminal."""

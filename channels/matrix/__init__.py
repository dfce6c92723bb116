"""The Matrix channel (matrix-nio)."""

"""Voice notes in and spoken replies out, through OpenAI-compatible audio endpoints."""

"""The agent API: an OpenAI-compatible chat-completions endpoint on the gateway's HTTP server."""

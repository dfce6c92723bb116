"""Features: what the agent can do beyond a plain turn, each in its own folder."""

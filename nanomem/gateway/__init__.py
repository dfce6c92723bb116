"""`nanomem gateway`: the agent loop, every enabled channel and the HTTP server (GET /health
and the routes channels add, its connections bounded) in one asyncio loop."""

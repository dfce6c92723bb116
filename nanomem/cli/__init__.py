"""The `nanomem` command: its subcommands, first run, onboarding, preflight and status."""

"""Channel adapters (terminal, Telegram) that plug into the nanomem core by name."""

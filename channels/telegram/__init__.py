"""The Telegram channel: Bot API polling and inbox intake, delivery, streaming drafts and
formatting."""

"""Slack: slack-bolt's asyncio app over Socket Mode or the Events API (docs/slack.md)."""

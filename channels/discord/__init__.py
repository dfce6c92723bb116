"""The Discord channel (discord.py): DMs, guild channels and threads, slash commands, buttons."""

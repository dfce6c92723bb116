"""Text that enters or leaves: secrets masked, control sequences stripped, valid UTF-8,
untrusted JSON parsed with limits, counts in words."""

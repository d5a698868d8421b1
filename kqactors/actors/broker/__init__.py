"""The broker/N actor: one broker connection on the main host's poll loop."""

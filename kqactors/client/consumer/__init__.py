"""The Consumer facade: poll()/consume(), group membership and offset look-ups (app process)."""

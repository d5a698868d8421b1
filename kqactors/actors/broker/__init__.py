"""The broker/N actor: one broker connection on the main host's poll loop, composed of its parts —
``actor`` (lifecycle, connection driving, request dispatch), ``transport`` (sockets, name resolution),
``sink`` (produce) and ``source`` (the consumer's fetch loop)."""

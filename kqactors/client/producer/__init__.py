"""The Producer facade: produce(), its per-partition buffers and the flusher thread (app process)."""

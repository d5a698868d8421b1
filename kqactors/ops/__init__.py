"""Every op contract between kqactors' actors and the app, one module per plane.

Runs in: every process (a contract is names and payload shapes only). ``client`` holds the ops every client
shares (main, broker actors, metadata, requests, statistics, shutdown), ``producer`` the produce path,
``consumer`` the fetch path and ``group`` the consumer group's. The prose contracts are
docs/producer-ops.md and docs/consumer-ops.md.
"""

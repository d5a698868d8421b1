"""Pure consumer fetch-pipeline logic (no processes, no sockets), wired to ops by the consumer actors.

Runs in: broker actors (``FetchPlanner``: Fetch request building and response interpretation), toppar hosts
(``SliceDecoder``: decode, aborted-transaction filtering, packing; ``PrefetchCredit``; ``VersionGate``) and
the app process (``MessageBatch``: lazy unpacking; ``CreditReturner``; ``PositionTable``).

Flow: app PositionTable (versions) → toppar VersionGate → broker FetchPlanner.start/seek; the planner's
FetchedSlice (payload + raw records frame) → toppar SliceDecoder → DecodedBatch frame (counted by
PrefetchCredit, which opens/closes the planner's flow) → app MessageBatch.take() → CreditReturner → toppar.
"""

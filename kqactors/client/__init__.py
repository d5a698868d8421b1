"""The app process: the facades an application calls (``producer/``, ``consumer/``) and what they share.

Runs in: the application's process only. Nothing here runs an actor: the facades start the runtime, send
ops to the actor hosts and serve their replies on the app's own threads. What every facade shares — the
runtime's start and close, error_cb, statistics, host-death notices, cluster metadata — is the client
handle (``handle/``: ClientHandle, ClusterMetadata), which each facade holds by composition. The app
imports no actor code: it names actors by "module:Factory" strings and speaks to them in the op
contracts of ``kqactors.ops``.
"""

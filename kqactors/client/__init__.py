"""The app process: the facades an application calls (``producer/``, ``consumer/``) and what they share.

Runs in: the application's process only. Nothing here runs an actor: the facades start the runtime, send
ops to the actor hosts and serve their replies on the app's own threads.
"""

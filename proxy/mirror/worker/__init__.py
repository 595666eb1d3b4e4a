"""The capture worker: the process that mirrors, captures, compares and records.

process (the worker's own loop, `python -m proxy.mirror.worker`), link (starting it and
talking to it from the proxy), remote (what the client path hands it), ipc and messages
(the channel and its typed messages), priority (its CPU scheduling).
"""

"""A response's numbered event log in motion, both ways: the worker's writer (numbers, commits,
publishes), one way to end a response outside its worker (ending), the events channel on Redis,
one subscription per API process fanned out to followers (hub), "read the log after N, then
follow it" (follow), and the two ways out: SSE and a JSON answer that waits for the end.
"""

"""What every process of the service runs on: supervised side tasks, round trips shared by callers
that ask together, metrics, readiness, the request log, child processes and garbage-collector
settings.
"""

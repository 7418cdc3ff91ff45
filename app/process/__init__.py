"""What every process of the service runs on, whatever it serves: supervised side tasks, round
trips shared by callers that ask together (batching), the egress guard its outbound requests go
through, metrics, readiness, the request log, child processes and garbage-collector settings.
It imports nothing else of the service."""

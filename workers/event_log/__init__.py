"""The event log's writer: numbers a generation's events, group-commits them to Postgres (with a
response's end, in the same statement), then publishes them; and the events of transient
responses held while Redis is away."""

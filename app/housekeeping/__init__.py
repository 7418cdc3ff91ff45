"""The loops every process runs beside its requests or jobs, each safe to run in many at once:
the reaper (a lost worker's responses continued or ended, lost jobs enqueued again), webhook
delivery, retention and the event log's daily partitions."""

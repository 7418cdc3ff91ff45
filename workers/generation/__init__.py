"""Generation: the jobs a worker runs (a response's generation, a token count), the event writer
that numbers, group-commits and publishes their events, the leases that say a generation lives,
and the events of transient responses held while Redis is away."""

"""What a worker keeps decoded between the jobs it runs: the contexts of `previous_response_id`
chains and the items of conversations, each read from Postgres on a miss (kept_copies)."""

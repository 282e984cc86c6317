"""Units of work: tasks and their outbox events, leases, the broker, fault points, backoff."""

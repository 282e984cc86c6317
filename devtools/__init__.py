"""What `make run` and `make test` stand on: the local stack (`devstack`: embedded PostgreSQL and
Redis, the secret key, the Procfile's processes) and a streaming replica for tests and benchmarks
(`standby`). Nothing in production imports it."""

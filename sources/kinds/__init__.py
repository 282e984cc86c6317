"""One module per kind of source; each lists its items and fetches their bytes (`base.Kind`).
Nothing here touches the database: a kind is given its configuration, its credentials, the
previous run's manifest and the limits, and answers with items and problems."""

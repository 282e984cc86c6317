"""Running one ingestion task: `run` claims it and runs its stages, `parse` -> `chunk` -> `embed`
-> `write` -> the switch, each recorded and reused through `stages`."""

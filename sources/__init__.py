"""Sources: knowledge bases kept in step with the folders, buckets, sites and repositories where
documents live. A source lists its items (`kinds/`), a sync run (`sync`) submits what changed
through the upload service and deletes what is gone, carefully (`deletion`)."""

"""Canon's date and time formats (FORMAT_MODULE_PATH): every admin page shows moments to the
second, year first, so a log line, an audit entry and a page can be compared at a glance."""

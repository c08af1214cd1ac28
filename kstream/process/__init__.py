"""Process concerns: the coordinator process, signals, GC tuning, `kstream run`'s embedded coordinator."""

"""OS hosting (not process functions, which are operators): the coordinator process, the
elected coordinator, signals, GC tuning, `kstream run`'s embedded coordinator."""

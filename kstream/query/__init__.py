"""Queryable state (docs/queries.md): what a running job, or any retained checkpoint,
holds for a key — point lookups, key scans and a key's windows of a stateful operator,
at two consistency levels (``latest``, ``checkpointed``), answered by any worker."""

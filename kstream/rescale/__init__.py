"""Rescaling keyed state: a checkpoint's or savepoint's state redistributed over new
partition counts (issue 45; docs/operations.md, "Rescaling").

layout (where the record key sits in each operator's tables; what is not keyed),
routing (key -> new task: the job's partitioners), core (one stage, streaming, pure),
savepoint (the store side: restore old tasks one at a time, upload new ones).
"""

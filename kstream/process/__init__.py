"""Process concerns: the coordinator process around its state machine."""

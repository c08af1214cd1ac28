"""Task runtime: operators, stream events, barrier alignment, watermarks, windows."""

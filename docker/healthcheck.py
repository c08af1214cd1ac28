"""The image's HEALTHCHECK: healthy while the worker runs at least one task.

Reads ``kstream_tasks_running`` from the worker's own metrics endpoint
(``http://127.0.0.1:$KSTREAM_METRICS_PORT/metrics``); exit 0 when it is 1 or more,
1 (with one line saying why) otherwise. Usable as a Kubernetes exec readiness probe too.
"""

import os
import sys
import urllib.request

port = os.environ.get("KSTREAM_METRICS_PORT", "9250").split("-")[0]
url = f"http://127.0.0.1:{port}/metrics"
try:
    with urllib.request.urlopen(url, timeout=4) as r:
        text = r.read().decode()
except OSError as e:
    sys.exit(f"unhealthy: metrics endpoint {url} does not answer ({e})")
running = [
    float(line.split()[-1]) for line in text.splitlines() if line.startswith("kstream_tasks_running ")
]
if not running or running[0] < 1:
    sys.exit(f"unhealthy: the worker runs no task (kstream_tasks_running {running or 'absent'})")

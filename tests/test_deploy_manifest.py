"""The Kubernetes example of docs/deploy.md: valid YAML with the fields the page relies on."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "docs" / "deploy.md"
DOCKERFILE = DEPLOY.parents[1] / "docker" / "Dockerfile"
CHECKPOINT_TIMEOUT_DEFAULT = 60.0


def manifest() -> dict[str, Any]:
    blocks = re.findall(r"```yaml\n(.*?)```", DEPLOY.read_text(), re.S)
    assert len(blocks) == 1, "docs/deploy.md has one yaml block, the StatefulSet"
    doc: dict[str, Any] = yaml.safe_load(blocks[0])
    return doc


def test_statefulset_keeps_local_state_on_a_volume_per_pod() -> None:
    m = manifest()
    assert (m["apiVersion"], m["kind"]) == ("apps/v1", "StatefulSet")
    spec = m["spec"]
    assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    (container,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]}
    assert mounts["state"] == env["KSTREAM_STATE_DIR"] == "/data/state"
    assert "state" in claims
    assert {"KSTREAM_BOOTSTRAP", "KSTREAM_STORE_URL", "KSTREAM_METRICS_PORT"} <= env.keys()
    assert container["args"][0] == "worker"


def test_readiness_reads_the_metrics_endpoint_the_image_serves() -> None:
    (container,) = manifest()["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == int(env["KSTREAM_METRICS_PORT"])
    # The same script as the image's HEALTHCHECK (tasks running, read from /metrics).
    probe = container["readinessProbe"]["exec"]["command"]
    assert probe == ["/opt/kstream/bin/python", "/usr/local/bin/kstream-healthcheck"]
    dockerfile = DOCKERFILE.read_text()
    assert f'CMD ["{probe[0]}", "{probe[1]}"]' in dockerfile
    assert "KSTREAM_METRICS_PORT=9250" in dockerfile
    assert container["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}


def test_grace_period_outlasts_the_final_checkpoint() -> None:
    spec = manifest()["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = container["args"]
    timeout = (
        float(args[args.index("--timeout") + 1]) if "--timeout" in args
        else CHECKPOINT_TIMEOUT_DEFAULT
    )  # fmt: skip
    assert spec["terminationGracePeriodSeconds"] > timeout
    assert spec["securityContext"]["runAsUser"] == 10001  # the image's user

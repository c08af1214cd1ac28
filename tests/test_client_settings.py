"""Kafka client settings: sources and precedence, refused settings, secrets never shown."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstream.cli import main
from kstream.cli.clientsettings import collect_settings, from_environment
from kstream.config import ConfigError, JobConfig, KafkaSettings, Replication, redact
from kstream.kafka.clients import KafkaUnreachable, check_cluster, make_producer

SECRET = "hunter2-very-secret"


def _props(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_precedence_file_then_environment_then_x(tmp_path: Path) -> None:
    path = _props(
        tmp_path,
        "# a Java client.properties\n"
        "bootstrap.servers=broker-1:9093,broker-2:9093\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "client.id=from-file\n"
        "linger.ms=7\n",
    )
    env = {
        "KSTREAM_KAFKA_CLIENT_ID": "from-env",
        "KSTREAM_KAFKA_LINGER_MS": "8",
        "KSTREAM_KAFKA_LOG__LEVEL": "3",  # '__' -> '_': log_level
        "KSTREAM_KAFKA_CONFIG": str(path),  # the file's path, not a setting
        "OTHER": "x",
    }
    settings, bootstrap = collect_settings(["linger.ms=9"], path, env)
    assert bootstrap == "broker-1:9093,broker-2:9093"
    assert dict(settings) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "from-env",
        "linger.ms": "9",
        "log_level": "3",
    }
    assert settings.origin("linger.ms") == "-X"
    assert settings.origin("client.id") == "environment KSTREAM_KAFKA_CLIENT_ID"
    assert settings.origin("security.protocol") == str(path)


def test_environment_names() -> None:
    got = from_environment(
        {"KSTREAM_KAFKA_SASL_MECHANISM": "PLAIN", "KSTREAM_KAFKA_SASL_USERNAME": "u"}
    )
    assert got == {
        "sasl.mechanism": ("PLAIN", "KSTREAM_KAFKA_SASL_MECHANISM"),
        "sasl.username": ("u", "KSTREAM_KAFKA_SASL_USERNAME"),
    }


def test_java_jaas_config_becomes_username_and_password(tmp_path: Path) -> None:
    path = _props(
        tmp_path,
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        f'    username="alice" password="{SECRET}";\n',
    )
    settings, _ = collect_settings([], path, {})
    assert dict(settings) == {
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": SECRET,
    }
    kerberos = _props(
        tmp_path, "sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required;\n"
    )
    with pytest.raises(ConfigError, match="login module"):
        collect_settings([], kerberos, {})


@pytest.mark.parametrize(
    "name",
    ["transactional.id", "isolation.level", "enable.auto.commit", "group.id", "bootstrap.servers"],
)
def test_owned_settings_are_refused_naming_setting_and_origin(name: str) -> None:
    with pytest.raises(ConfigError) as e:
        collect_settings([f"{name}={SECRET}"], None, {})
    assert f"{name} (from -X) is set by kstream" in str(e.value)
    assert SECRET not in str(e.value)


def test_owned_settings_with_kstreams_own_value_are_accepted() -> None:
    settings, _ = collect_settings(["acks=all", "enable.idempotence=true"], None, {})
    assert dict(settings) == {"acks": "all", "enable.idempotence": "true"}
    with pytest.raises(ConfigError, match="acks"):
        collect_settings(["acks=1"], None, {})
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        collect_settings([], None, {"KSTREAM_KAFKA_ENABLE_IDEMPOTENCE": "false"})


def test_malformed_x_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        collect_settings(["sasl.mechanism"], None, {})


def test_secrets_are_masked_in_repr_and_messages() -> None:
    settings = KafkaSettings({"sasl.username": "alice", "sasl.password": SECRET})
    cfg = JobConfig("app", "b:9092", kafka=settings)
    assert SECRET not in repr(settings) and SECRET not in repr(cfg)
    assert "alice" in repr(settings)
    assert redact(f"auth with {SECRET} failed", settings) == "auth with *** failed"
    assert JobConfig("app", "b:9092", kafka=KafkaSettings({"a.b": "1"})) == JobConfig(
        "app", "b:9092", kafka=KafkaSettings({"a.b": "1"})
    )


def test_a_setting_librdkafka_rejects_is_a_config_error_without_secrets() -> None:
    with pytest.raises(ConfigError, match=r"no\.such\.setting"):
        make_producer("127.0.0.1:1", extra={"no.such.setting": "1", "sasl.password": SECRET})
    with pytest.raises(ConfigError) as e:
        make_producer(
            "127.0.0.1:1",
            extra={
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": SECRET,  # echoed by librdkafka: masked as the password's value
                "sasl.password": SECRET,
            },
        )
    assert "***" in str(e.value) and SECRET not in str(e.value)


def test_replication_validation() -> None:
    assert Replication().topic_config() == {}
    assert Replication(3, 2).topic_config() == {"min.insync.replicas": "2"}
    with pytest.raises(ConfigError, match="exceeds"):
        Replication(1, 2)
    with pytest.raises(ConfigError, match="replication factor"):
        Replication(0)


def test_unreachable_cluster_is_one_clear_error_within_the_timeout() -> None:
    t0 = time.monotonic()
    with pytest.raises(KafkaUnreachable) as e:
        check_cluster("127.0.0.1:1", {"sasl.password": SECRET}, timeout=1.5)
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert msg.startswith("cannot reach Kafka at 127.0.0.1:1: no metadata answer within 1.5s")
    assert "Connection refused" in msg and "\n" not in msg and SECRET not in msg


def test_cli_refuses_owned_settings_and_never_shows_secrets(tmp_path: Path) -> None:
    topology = Path(__file__).parent.parent / "topologies" / "wordcount.py"
    runner = CliRunner()
    env = {"KSTREAM_KAFKA_SASL_PASSWORD": SECRET}
    res = runner.invoke(
        main,
        ["worker", str(topology), "-b", "127.0.0.1:1", "-X", "isolation.level=read_uncommitted"],
        env=env,
    )
    assert res.exit_code == 2
    assert "isolation.level (from -X) is set by kstream" in res.output
    assert SECRET not in res.output
    for cmd in ("worker", "coordinator", "run"):
        helped = runner.invoke(main, [cmd, "--help"], env=env)
        assert helped.exit_code == 0
        assert "-X NAME=VALUE" in helped.output and "--kafka-config" in helped.output
        assert SECRET not in helped.output

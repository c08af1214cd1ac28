"""Kafka client settings from the command line, the environment and a properties file.

Three sources, later wins (documented in docs/operations.md, "Production"):

1. ``--kafka-config FILE`` (env ``KSTREAM_KAFKA_CONFIG``): a Java-style
   ``client.properties``. Its ``bootstrap.servers`` is the bootstrap when neither
   ``--bootstrap`` nor ``KSTREAM_BOOTSTRAP`` gives one; a Java ``sasl.jaas.config``
   for the PLAIN or SCRAM login module becomes ``sasl.username``/``sasl.password``.
2. Environment ``KSTREAM_KAFKA_<NAME>``: ``NAME`` lower-cased, ``_`` -> ``.``,
   ``__`` -> ``_`` (``KSTREAM_KAFKA_SASL_MECHANISM`` -> ``sasl.mechanism``).
3. ``-X name=value``, repeatable (as kcat takes it).

This module is the only one besides the click options that reads ``os.environ``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import javaproperties

from kstream.config import ConfigError, KafkaSettings

ENV_PREFIX = "KSTREAM_KAFKA_"
CONFIG_FILE_ENV = "KSTREAM_KAFKA_CONFIG"

F = Callable[..., Any]

_JAAS_MODULES = ("PlainLoginModule", "ScramLoginModule")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def kafka_options(f: F) -> F:
    """``-X name=value`` (repeatable) and ``--kafka-config FILE``."""
    f = click.option(
        "--kafka-config",
        envvar=CONFIG_FILE_ENV,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        metavar="FILE",
        help="Kafka client settings from a Java-style client.properties "
        f"[env {CONFIG_FILE_ENV}]; overridden by {ENV_PREFIX}<NAME> variables and -X.",
    )(f)
    return click.option(
        "-X",
        "kafka_settings",
        multiple=True,
        metavar="NAME=VALUE",
        help="A librdkafka client setting for every client of the job (repeatable; wins over "
        f"{ENV_PREFIX}<NAME>, e.g. {ENV_PREFIX}SASL_MECHANISM=PLAIN, and --kafka-config).",
    )(f)


def from_environment(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Settings from ``KSTREAM_KAFKA_<NAME>`` variables (not ``KSTREAM_KAFKA_CONFIG``):
    name -> (value, variable)."""
    out = {}
    for var, value in environ.items():
        if not var.startswith(ENV_PREFIX) or var == CONFIG_FILE_ENV:
            continue
        name = var[len(ENV_PREFIX) :].lower()
        out[name.replace("__", "\0").replace("_", ".").replace("\0", "_")] = (value, var)
    return out


def from_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """Settings from ``-X name=value`` arguments (a malformed one is a ConfigError)."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"-X takes NAME=VALUE, got {pair.split('=')[0]!r} without '='")
        out[name.strip()] = value
    return out


def from_properties(path: Path) -> dict[str, str]:
    """Settings from a Java-style properties file (``sasl.jaas.config`` translated)."""
    try:
        with path.open(encoding="utf-8") as fp:
            props = dict(javaproperties.load(fp))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"cannot read Kafka client settings from {path}: {e}") from None
    jaas = props.pop("sasl.jaas.config", None)
    if jaas is not None:
        props.update(_from_jaas(jaas, path))
    return props


def _from_jaas(jaas: str, path: Path) -> dict[str, str]:
    """``sasl.username``/``sasl.password`` from a PLAIN or SCRAM JAAS line (never echoed)."""
    if not any(m in jaas for m in _JAAS_MODULES):
        raise ConfigError(
            f"{path}: sasl.jaas.config names a login module librdkafka cannot use; "
            "only the PLAIN and SCRAM modules are translated (set sasl.username and "
            "sasl.password instead)"
        )
    options = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(jaas)}
    if "username" not in options or "password" not in options:
        raise ConfigError(f'{path}: sasl.jaas.config needs username="..." and password="..."')
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def collect_settings(
    pairs: Sequence[str], config_file: Path | None, environ: Mapping[str, str] | None = None
) -> tuple[KafkaSettings, str | None]:
    """The user's client settings (file < environment < -X) and the file's bootstrap.

    Raises ConfigError for a malformed source or a setting kstream owns, naming
    the setting and where it came from (never its value).
    """
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    file_bootstrap: str | None = None
    if config_file is not None:
        props = from_properties(config_file)
        file_bootstrap = props.pop("bootstrap.servers", None) or None
        values.update(props)
        origins.update(dict.fromkeys(props, str(config_file)))
    for name, (value, var) in from_environment(environ).items():
        values[name] = value
        origins[name] = f"environment {var}"
    cli = from_pairs(pairs)
    values.update(cli)
    origins.update(dict.fromkeys(cli, "-X"))
    return KafkaSettings(values, origins), file_bootstrap

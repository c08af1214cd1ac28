"""What the benchmark runs: the contenders, the workloads they run in, and the targets their
ratios are held against (see benchmarks/README.md for the definitions)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.generate import Format

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
CONTENDER_DIR = BENCH_DIR / "contenders"
QUIX_VENV = BENCH_DIR / ".venv-quix"
QUIX_PYTHON = QUIX_VENV / "bin" / "python"
QUIX_REQUIREMENT = "quixstreams[avro]==3.28.1"
QUIX_RUNS = 1  # Contender.max_runs of Quix Streams: one run of each workload
KAFKA_STREAMS_RECOVERY_RUNS = 1  # Contender.max_runs of Kafka Streams' recovery


@dataclass(frozen=True)
class Contender:
    """One contender process: a module in ``benchmarks/contenders`` and the env it runs in."""

    name: str  # the name ratios refer to: raw_pipe, raw_stateless, kstream, quix, ...
    module: str  # file name in benchmarks/contenders, without .py
    env: str = "kstream"  # "kstream": this interpreter; "quix": benchmarks/.venv-quix
    args: tuple[str, ...] = ()
    #: At most this many of the ``--runs`` (None: all). Quix Streams runs once (0.5-2
    #: minutes a run: three runs each were over half of the full run's time), and so does
    #: Kafka Streams' recovery (about a minute a run): kstream's ratios to them are several
    #: times their targets (RESULTS.md), and the full run must fit in 45 minutes.
    max_runs: int | None = None

    def runs(self, asked: int) -> int:
        """How many runs this contender gets when ``asked`` runs per contender."""
        return asked if self.max_runs is None else min(asked, self.max_runs)

    def unavailable(self) -> str | None:
        """Why this contender cannot run here, or None when it can."""
        if not (CONTENDER_DIR / f"{self.module}.py").exists():
            return f"benchmarks/contenders/{self.module}.py is missing"
        if self.env == "quix" and not QUIX_PYTHON.exists():
            return "Quix Streams venv benchmarks/.venv-quix is missing (--no-quix-install)"
        return None

    def argv(self, common: Sequence[str]) -> list[str]:
        python = str(QUIX_PYTHON) if self.env == "quix" else sys.executable
        return [python, "-m", f"benchmarks.contenders.{self.module}", *common, *self.args]


@dataclass(frozen=True)
class Workload:
    """A job and its input, run by each of its contenders."""

    key: str
    title: str
    fmt: Format
    contenders: tuple[Contender, ...]
    stateless: bool  # output checked exactly against expected_stateless()
    args: tuple[str, ...] = ()
    dedup: bool = False  # output count checked exactly against expected_dedup()
    windows: bool = False  # output checked exactly against expected_windows()


#: Contenders whose output is not workload 1's: the raw pipe forwards the input as is, the
#: producer perf tool writes records of its own, the consumer perf tool writes nothing.
PASS_THROUGH = "raw_pipe"
PERF_PRODUCER = "broker_producer_perf"
PERF_CONSUMER = "broker_consumer_perf"
#: w5r's contender decoding through the Schema Registry (its rival: "kstream", fixed schema).
REGISTRY_PATH = "kstream_registry"


def workloads(window_ms: int) -> list[Workload]:
    """Workloads 1-6 (4: checkpoint overhead); the recovery runs are in ``harness``."""
    w = ("--window-ms", str(window_ms), "--commit-interval", "1")
    eos, alo = ("--guarantee", "exactly-once"), ("--guarantee", "at-least-once")

    def stateless(fmt: str) -> tuple[Contender, ...]:
        f = ("--format", fmt)
        both = (
            Contender(PASS_THROUGH, "raw_pipe", args=f),
            Contender("raw_stateless", "raw_stateless", args=f),
            Contender("kstream", "kstream_stateless", args=(*f, *alo)),
            Contender("quix", "quix_stateless", "quix", (*f, *alo), QUIX_RUNS),
        )
        if fmt != "json":
            return both
        return (
            *both,
            Contender("kafka_streams", "kafkastreams", args=(*alo, "--job", "stateless")),
            Contender(PERF_PRODUCER, "broker_perf", args=("--tool", "producer")),
            Contender(PERF_CONSUMER, "broker_perf", args=("--tool", "consumer")),
        )

    def window(g: tuple[str, str]) -> tuple[Contender, ...]:
        return (
            Contender("kstream", "kstream_window_count", args=(*w, *g)),
            Contender("quix", "quix_window_count", "quix", (*w, *g), QUIX_RUNS),
            Contender("kafka_streams", "kafkastreams", args=(*w, *g, "--job", "window")),
        )

    return [
        Workload("w1", "1. JSON decode → filter → map → encode (stateless)", "json", stateless("json"), True),
        Workload("w2", "2. keyed tumbling-window count, RocksDB, exactly-once", "json", window(eos), False, windows=True),
        Workload("w3", "3. keyed tumbling-window count, RocksDB, at-least-once", "json", window(alo), False, windows=True),
        Workload(
            "w4",
            "4a. workload 2 in kstream: checkpoints every 1 s vs. off",
            "json",
            (
                Contender("kstream_ckpt_1s", "kstream_window_count", args=(*w, *eos, "--checkpointing", "on")),
                Contender("kstream_ckpt_off", "kstream_window_count", args=(*w, *alo, "--checkpointing", "off")),
            ),
            False,
            windows=True,
        ),
        Workload("w5", "5. workload 1 with Avro (fastavro) values", "avro", stateless("avro"), True),
        Workload(
            "w5r",
            "5r. workload 5 in kstream, registry-framed Avro: the Schema Registry path (Apicurio) vs. the fixed schema",
            "avro-sr",
            (
                Contender("kstream", "kstream_stateless", args=("--format", "avro-sr", *alo, "--decode", "fixed")),
                Contender(REGISTRY_PATH, "kstream_stateless", args=("--format", "avro-sr", *alo, "--decode", "registry")),
            ),
            True,
        ),
        Workload(
            "w6",
            "6. deduplication within an hour per key: process function (kstream) vs. stateful apply (Quix), RocksDB, at-least-once",
            "json",
            (
                Contender("kstream", "kstream_dedup", args=(*w, *alo)),
                Contender("quix", "quix_dedup", "quix", (*w, *alo), QUIX_RUNS),
            ),
            False,
            dedup=True,
        ),
    ]  # fmt: skip


def recovery_contenders() -> list[Contender]:
    """Workload 4's recovery jobs: the window count of w2, run until killed (``--forever``)."""
    return [
        Contender("kstream", "kstream_recovery"),
        Contender("quix", "quix_recovery", "quix", max_runs=QUIX_RUNS),
        Contender(
            "kafka_streams",
            "kafkastreams",
            args=("--job", "window"),
            max_runs=KAFKA_STREAMS_RECOVERY_RUNS,
        ),
    ]


@dataclass(frozen=True)
class Target:
    """A claimed throughput ratio: ``numerator / denominator`` (records/s) >= ``bound``."""

    workload: str
    numerator: str
    denominator: str
    bound: float
    text: str


@dataclass(frozen=True)
class RecoveryTarget:
    """A claimed recovery-time ratio: ``numerator / denominator`` (seconds) <= ``bound``,
    for one recovery mode (``wipe`` or ``keep``)."""

    mode: str
    numerator: str
    denominator: str
    bound: float
    text: str


TARGETS = (
    Target("w2", "kstream", "kafka_streams", 1.0, "w2 exactly-once: kstream >= 1.0x Kafka Streams exactly-once"),
    Target("w1", "kstream", "raw_pipe", 0.8, "w1: kstream >= 0.8x the callback-free raw pipe"),
    Target("w1", "kstream", "quix", 3.0, "w1: kstream >= 3x Quix Streams"),
    Target("w2", "kstream", "quix", 2.0, "w2: kstream >= 2x Quix Streams"),
    Target("w3", "kstream", "quix", 2.0, "w3: kstream >= 2x Quix Streams"),
    # Issue 43: the registry path costs <= 1.1x the fixed-schema path per record.
    Target("w5r", REGISTRY_PATH, "kstream", round(1 / 1.1, 3), "w5r: the registry path >= 1/1.1x the fixed-schema path (<= 1.1x its cost per record)"),
)  # fmt: skip
#: The checkpoint overhead, ``1 - rate(kstream_ckpt_1s) / rate(kstream_ckpt_off)`` in w4.
CHECKPOINT_OVERHEAD_BOUND = 0.05
RECOVERY_TARGETS = (
    RecoveryTarget("wipe", "kstream", "quix", 0.1, "recovery, local state wiped: kstream <= 0.1x Quix Streams"),
    RecoveryTarget("wipe", "kstream", "kafka_streams", 1.0, "recovery, local state wiped: kstream <= 1.0x Kafka Streams"),
    RecoveryTarget("keep", "kstream", "quix", 0.2, "extra: recovery with local state kept: kstream <= 0.2x Quix Streams"),
    RecoveryTarget("keep", "kstream", "kafka_streams", 1.0, "extra: recovery with local state kept: kstream <= 1.0x Kafka Streams"),
)  # fmt: skip
INFO_RATIOS = (
    ("w3", "kstream", "kafka_streams"),
    ("w1", "kstream", "kafka_streams"),
    ("w6", "kstream", "quix"),
    ("w5", "kstream", "quix"),
    ("w1", "kstream", "raw_stateless"),
    ("w5", "kstream", "raw_stateless"),
    ("w1", "kafka_streams", "raw_pipe"),
    ("w1", "quix", "raw_pipe"),
    ("w1", "raw_stateless", "raw_pipe"),
    ("w1", "raw_pipe", PERF_CONSUMER),
    ("w1", "raw_pipe", PERF_PRODUCER),
    ("w1", "kstream", PERF_CONSUMER),
)

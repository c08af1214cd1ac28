"""One CLI grammar: every command's ``--help`` works, and the options commands share are
spelled the same everywhere (``--app-id``, ``--bootstrap/-b``, ``--store``,
``--store-option``, with the same environment variables); the command table
(docs/operations.md) names commands that exist; the old positional app ids still work, with a note."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot, write_metadata
from kstream.cli import common
from kstream.cli.main import main

COMMAND_TABLE = Path(__file__).resolve().parent.parent / "docs" / "operations.md"

# name -> (option strings, environment variable)
SHARED = {
    "app_id": (["--app-id"], "KSTREAM_APP_ID"),
    "bootstrap": (["--bootstrap", "-b"], "KSTREAM_BOOTSTRAP"),
    "store_url": (["--store"], "KSTREAM_STORE_URL"),
    "store_options": (["--store-option"], None),
}
# Commands that address a job, and those that talk to Kafka.
TAKE_APP_ID = {
    "run", "worker", "coordinator", "status", "savepoint", "savepoints list",
    "checkpoints list", "checkpoints show", "state dump",
}  # fmt: skip
TAKE_BOOTSTRAP = {
    "run", "worker", "coordinator", "status", "savepoint",
    "dev topics create", "dev produce", "dev consume", "state rescale",
}  # fmt: skip


def walk(group: click.Group, ctx: click.Context, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        path = f"{prefix}{name}"
        out[path] = cmd
        if isinstance(cmd, click.Group):
            out |= walk(cmd, ctx, f"{path} ")
    return out


COMMANDS = walk(main, click.Context(main))


def test_every_commands_help_works_and_the_shared_options_are_spelled_the_same() -> None:
    runner = CliRunner()
    helps: dict[str, dict[str, str]] = {}
    for path, cmd in COMMANDS.items():
        result = runner.invoke(main, [*path.split(), "--help"])
        assert result.exit_code == 0, (path, result.output)
        for p in cmd.params:
            if isinstance(p, click.Option) and p.name in SHARED:
                opts, env = SHARED[p.name]
                assert (p.opts, p.envvar) == (opts, env), path
                helps.setdefault(p.name, {})[path] = p.help or ""
    assert set(helps["app_id"]) >= TAKE_APP_ID
    assert {p for p in helps["bootstrap"]} == TAKE_BOOTSTRAP
    # The same words about the fallback everywhere (`run` adds that it starts the broker).
    for path, text in helps["bootstrap"].items():
        assert text.startswith(
            "Kafka bootstrap servers [env KSTREAM_BOOTSTRAP; else the local broker of "
            "`kstream dev kafka start`"
        ), path
    assert len(set(helps["store_url"].values())) == 1


def test_the_top_level_help_says_workers_elect_their_coordinator() -> None:
    text = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    assert "deploy any number of identical `kstream worker` processes: they" in text
    assert "elect the one that hosts the job's coordinator" in text
    assert "deploy `kstream coordinator` plus" not in text


def test_the_docs_command_table_names_commands_that_exist() -> None:
    cells = re.findall(r"^\| (`kstream .+?) \| ", COMMAND_TABLE.read_text(), re.M)
    rows = [row for cell in cells for row in re.findall(r"`kstream ([^`]+)`", cell)]
    assert len(rows) >= 12
    for row in rows:
        words: list[str] = []
        for word in row.split():
            if not re.fullmatch(r"[a-z][a-z\\|-]*", word) or word.startswith("-"):
                break
            words.append(word)
        *head, last = words
        for alternative in last.split("\\|"):
            path = " ".join([*head, alternative])
            assert path in COMMANDS, (
                f"docs/operations.md names `kstream {path}`, which does not exist"
            )


def test_without_bootstrap_every_command_falls_back_to_the_local_broker_or_says_how(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KSTREAM_DEV_STATE_DIR", str(tmp_path))  # no broker recorded there
    monkeypatch.delenv("KSTREAM_BOOTSTRAP", raising=False)
    for args in (["status", "--app-id", "a"], ["savepoint", "--app-id", "a"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert result.output.splitlines()[-1] == f"Error: {common.NO_BOOTSTRAP}"
    assert common.resolve_bootstrap("k:9092") == "k:9092"
    monkeypatch.setattr(common, "local_bootstrap", lambda: "127.0.0.1:40001")
    assert common.resolve_bootstrap(None) == "127.0.0.1:40001"


def test_the_positional_app_id_still_works_with_a_deprecation_note(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    result = CliRunner().invoke(main, ["savepoints", "list", "clicks", "--store", store])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "kstream: the argument APP is deprecated: use --app-id clicks",
        "no savepoints of clicks",
    ]
    result = CliRunner().invoke(
        main, ["savepoints", "list", "--app-id", "clicks", "--store", store]
    )
    assert result.output.splitlines() == ["no savepoints of clicks"]
    result = CliRunner().invoke(main, ["savepoints", "list", "--store", store])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: give the job's app id: --app-id APP (or set KSTREAM_APP_ID)"
    )


def test_showing_a_pruned_checkpoint_names_the_retained_ones(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for n in (7, 8, 9):
        write_metadata(
            store, "clicks", CheckpointMetadata(n, 1, 1.0, 2.0, {"t": TaskSnapshot("h")})
        )
    args = ["checkpoints", "show", "--app-id", "clicks", "--store", f"file://{tmp_path}"]
    result = CliRunner().invoke(main, [*args, "5"])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "kstream: no checkpoint 5 of 'clicks': the retained checkpoints are 7, 8, 9 "
        "(older ones were deleted by retention, --retained)"
    ]
    result = CliRunner().invoke(main, [*args, "8"])
    assert result.exit_code == 0 and result.output.startswith("checkpoint 8 completed (attempt 1)")

"""`smartune`: the command line. Each subcommand imports its side (worker, service, bench) lazily."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from cli import (
    admin_cmd,
    audit_cmd,
    bench_cmd,
    client_cmd,
    completion_cmd,
    data_cmd,
    migrate_cmd,
    models_cmd,
    serve_cmd,
    stop_cmd,
    sweep_cmd,
    train_cmd,
    view_cmd,
    webhooks_cmd,
)
from cli.exit_codes import ExitCode, for_error
from smartune.errors import SmartuneError  # the SDK's refusals; `import smartune` loads the stdlib only

Registrar = Callable[
    ["argparse._SubParsersAction[argparse.ArgumentParser]"], None
]  # adds one subcommand and sets `handler`
_SUBCOMMANDS: tuple[Registrar, ...] = (
    train_cmd.register,
    sweep_cmd.register,
    bench_cmd.register,
    serve_cmd.register,
    client_cmd.register,
    data_cmd.register,
    models_cmd.register,
    audit_cmd.register,
    webhooks_cmd.register,
    view_cmd.register,
    admin_cmd.register,
    migrate_cmd.register,
    stop_cmd.register,
    completion_cmd.register,
)


def build_parser() -> argparse.ArgumentParser:
    exits = ", ".join(f"{code.value} {code.name.lower().replace('_', ' ')}" for code in ExitCode)
    parser = argparse.ArgumentParser(
        prog="smartune",
        description="Robust fine-tuning (SMART) experiments: train, sweep, serve.",
        epilog=f"exit status: {exits} (docs/cli.md)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _SUBCOMMANDS:
        register(sub)
    parser.set_defaults(root_parser=parser)  # what `smartune completion` describes
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status is one of cli.exit_codes.ExitCode (docs/cli.md)."""
    args = build_parser().parse_args(argv)  # a usage error exits 2 (ExitCode.USAGE) here
    try:
        client_cmd.refuse_key_flag(args)  # a key given as a flag is refused before anything runs
        return int(args.handler(args) or ExitCode.OK)
    except (ValueError, OSError, SmartuneError) as err:  # bad input, a refusal: one clear line
        for line in _describe(err):
            print(f"smartune {args.command}: error: {line}", file=sys.stderr)
        return int(for_error(err))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)


def _describe(err: Exception) -> list[str]:
    """A pydantic ValidationError (settings, a spec) as `field: why` lines, without the input it quotes
    (settings hold secrets); any other error as its message. pydantic is not imported here: `smartune`
    starts without it."""
    errors = getattr(err, "errors", None)
    if type(err).__name__ == "ValidationError" and callable(errors):
        lines = []
        for error in errors():
            where = ".".join(str(part) for part in error["loc"]) or getattr(err, "title", "")
            lines.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
        return lines
    return [str(err)]


if __name__ == "__main__":
    sys.exit(main())

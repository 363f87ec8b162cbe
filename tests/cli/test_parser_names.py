"""Every command's arguments keep distinct names: a positional that shares its `dest` with an option is
silently overwritten by it (or overwrites it). `smartune webhooks add URL` once stored the webhook's URL
where `--url` keeps the server's, so the request, with the team's API key, went to the webhook receiver."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from cli import webhooks_cmd
from cli.main import build_parser


def _commands(
    parser: argparse.ArgumentParser, path: str = "smartune"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, f"{path} {name}")


def test_no_positional_shares_its_name_with_an_option() -> None:
    clashes = []
    for path, parser in _commands(build_parser()):
        actions = [
            a for a in parser._actions if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)
        ]
        positional = {a.dest for a in actions if not a.option_strings}
        options = {a.dest for a in actions if a.option_strings}
        clashes += [f"{path}: {dest}" for dest in sorted(positional & options)]
    assert not clashes


def test_webhooks_add_sends_to_the_server_and_registers_the_receiver(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    class Client:
        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None: ...

        def add_webhook(self, url: str, events: list[str] | None) -> dict[str, object]:
            seen["webhook"] = url
            return {"id": 1, "team": "nlp", "url": url, "events": events or [], "secret": "whsec_x"}

    def connect(args: argparse.Namespace) -> Client:
        seen["server"] = args.url
        return Client()

    monkeypatch.setattr(webhooks_cmd, "connect", connect, raising=False)
    monkeypatch.setattr("cli.client_cmd.connect", connect)
    args = build_parser().parse_args(
        [
            "webhooks",
            "add",
            "https://ci.example.com/hook",
            "--url",
            "http://smartune:8000",
            "--event",
            "job.failed",
        ]
    )
    assert args.handler(args) == 0
    assert seen == {"server": "http://smartune:8000", "webhook": "https://ci.example.com/hook"}

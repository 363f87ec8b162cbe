"""`smartune data push FILE|FOLDER --name N --task T | list | show NAME[@V] | publish NAME@V | delete NAME@V`.

Uploaded datasets through the SDK (`Client.push_dataset`, ...): `push` sends a file or a folder's table files
(train.tsv, dev.tsv, ...; test splits are skipped, and said so) with a progress bar on stderr; the server
reads every row as training will and answers with the version and its digest, which a job spec names as
`data: dataset:NAME` (pinned at submission), `dataset:NAME@V` or `dataset:sha256:<digest>`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cli import client_cmd
from cli.client_cmd import common, emit_json, show
from cli.completion_cmd import FILE, completes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("data", help="upload and list datasets on the server (validated, content-addressed)")
    actions = p.add_subparsers(dest="data", required=True, metavar="ACTION")
    push = actions.add_parser("push", help="upload a file or a task folder (train.tsv, dev.tsv, ...)")
    completes(push.add_argument("path", help="a file, or a folder whose table files are pushed"), FILE)
    push.add_argument("--name", required=True, help="the dataset's name in your team")
    push.add_argument("--task", required=True, help="the task it is data of (rte, sst2, mnli, ...)")
    push.add_argument("--description", default=None)
    push.add_argument("--no-progress", action="store_true", help="no progress bar")
    common(push)
    push.set_defaults(handler=push_data)
    listing = actions.add_parser("list", help="your team's datasets and the published ones")
    common(listing)
    listing.set_defaults(handler=list_data)
    for name, helping, handler in (
        ("show", "a dataset's versions, or one version (NAME@V): digest, files, rows", show_data),
        ("publish", "let every team read a version (an admin key)", publish_data),
        ("delete", "delete a version (refused while an unfinished job reads it)", delete_data),
    ):
        action = actions.add_parser(name, help=helping)
        action.add_argument("dataset", help="NAME or NAME@VERSION" if name == "show" else "NAME@VERSION")
        action.add_argument("--team", default=None, help="the owner, where two teams use one name (admins)")
        common(action)
        action.set_defaults(handler=handler)


def _version(text: str) -> tuple[str, int | None]:
    name, at, number = text.rpartition("@")
    if not at:
        return text, None
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"{text!r}: the version after '@' is a whole number from 1")
    return name, int(number)


def _pinned(text: str) -> tuple[str, int]:
    name, version = _version(text)
    if version is None:
        raise ValueError(f"{text!r}: name the version, NAME@VERSION")
    return name, version


def push_data(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from smartune.uploads import dataset_files

    chosen, skipped = dataset_files(args.path)
    for path in skipped:
        print(f"skipped {path.name} (not a table file, or a test split without labels)", file=sys.stderr)
    total = sum(p.stat().st_size for p in chosen)
    bar = tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        desc=f"push {args.name}",
        disable=args.no_progress,
        file=sys.stderr,
    )

    def progress(sent: int, whole: int) -> None:
        bar.total = whole
        bar.update(sent - bar.n)

    with bar, client_cmd.connect(args) as client:
        made = client.push_dataset(args.path, args.name, args.task, args.description, progress=progress)
    if args.json:
        emit_json(made)
        return 0
    news = "new version" if made["created"] else "unchanged: the latest version has this content"
    print(f"{made['name']}@{made['version']} ({news})")
    _describe(made)
    return 0


def _describe(item: dict[str, Any]) -> None:
    rows = ", ".join(f"{split} {n}" for split, n in item["rows"].items())
    print(
        f"  task {item['task']}, team {item['team']}{', published' if item['published'] else ''}; rows: {rows}"
    )
    print(f"  data: {item['ref']}")
    for file in item["files"]:
        print(f"  {file['name']:<24} {file['bytes']:>12,} B  sha256 {file['sha256']}")


def _table(items: list[dict[str, Any]]) -> None:
    if not items:
        print("no datasets")
    for item in items:
        shared = " published" if item["published"] else ""
        print(f"{item['name']}@{item['version']:<4} {item['task']:<8} {item['team']:<16} "
              f"{item['size_bytes']:>12,} B  sha256:{item['digest'][:12]}{shared}")  # fmt: skip


def list_data(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.datasets(), _table)


def show_data(args: argparse.Namespace) -> int:
    name, version = _version(args.dataset)

    def render(found: dict[str, Any]) -> None:
        for item in found["data"] if version is None else [found]:
            print(f"{item['name']}@{item['version']}")
            _describe(item)

    return show(args, lambda client: client.dataset(name, version, team=args.team), render)


def publish_data(args: argparse.Namespace) -> int:
    name, version = _pinned(args.dataset)
    return show(args, lambda client: client.publish_dataset(name, version, args.team),
                lambda item: print(f"{item['name']}@{item['version']} is published to every team"))  # fmt: skip


def delete_data(args: argparse.Namespace) -> int:
    name, version = _pinned(args.dataset)
    return show(args, lambda client: client.delete_dataset(name, version, args.team),
                lambda item: print(f"deleted {item['name']}@{item['version']}"))  # fmt: skip

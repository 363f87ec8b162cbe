"""`smartune webhooks add URL [--event E]... | list | rm ID | deliveries ID`: a team's webhooks (docs/webhooks.md).

Through the SDK (`Client.add_webhook`, ...). `add` prints the webhook's id and its signing secret, which
the server shows this once; `deliveries` shows each delivery's state, attempts, last HTTP status or
error and when the next attempt is due.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.client_cmd import common, show

EVENTS = (
    "job.succeeded", "job.failed", "job.lost", "job.cancelled", "audit.pass", "audit.fail",
    "audit.not-comparable", "budget.80", "budget.100",
)  # fmt: skip


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("webhooks", help="signed POSTs to your URLs when jobs end (add, list, rm, deliveries)")
    actions = p.add_subparsers(dest="webhooks", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="register a URL; prints its signing secret, shown once")
    # Not `url`: that is the server's (--url, common()); sharing the name sent the request, and the key, to the webhook.
    add.add_argument("webhook_url", metavar="URL", help="an http(s) URL at a global address")
    add.add_argument(
        "--event",
        action="append",
        choices=EVENTS,
        default=None,
        help="an event to receive (repeatable; default: job.succeeded, job.failed, job.lost)",
    )
    common(add)
    add.set_defaults(handler=add_webhook)
    listing = actions.add_parser("list", help="your team's webhooks (every team's with an admin key)")
    common(listing)
    listing.set_defaults(handler=list_webhooks)
    remove = actions.add_parser("rm", help="delete a webhook: nothing more is sent to it")
    remove.add_argument("id", type=int)
    common(remove)
    remove.set_defaults(handler=remove_webhook)
    deliveries = actions.add_parser("deliveries", help="a webhook's latest deliveries, newest first")
    deliveries.add_argument("id", type=int)
    deliveries.add_argument("--limit", type=int, default=20)
    common(deliveries)
    deliveries.set_defaults(handler=list_deliveries)


def _created(hook: dict[str, Any]) -> None:
    print(f"webhook {hook['id']} of team {hook['team']}: {hook['url']} ({', '.join(hook['events'])})")
    print(f"secret: {hook['secret']}")
    print("(shown once: the receiver checks each delivery's Smartune-Signature with it)")


def add_webhook(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.add_webhook(args.webhook_url, args.event), _created)


def _table(hooks: list[dict[str, Any]]) -> None:
    if not hooks:
        print("no webhooks")
    for hook in hooks:
        print(f"{hook['id']:<6} {hook['team']:<16} {','.join(hook['events']):<40} {hook['url']}")


def list_webhooks(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.webhooks(), _table)


def remove_webhook(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.delete_webhook(args.id),
                lambda hook: print(f"deleted webhook {hook['id']} ({hook['url']})"))  # fmt: skip


def _when(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"


def _deliveries(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("no deliveries yet")
        return
    print(f"{'ID':<8} {'EVENT':<22} {'STATE':<10} {'TRIES':>5} {'LAST':<28} NEXT")
    for row in rows:
        last = str(row["last_status"]) if row["last_status"] is not None else (row["last_error"] or "-")
        print(f"{row['id']:<8} {row['event']:<22} {row['state']:<10} {row['attempts']:>5} "
              f"{last[:28]:<28} {_when(row['next_attempt_at'])}")  # fmt: skip


def list_deliveries(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.webhook_deliveries(args.id, args.limit), _deliveries)

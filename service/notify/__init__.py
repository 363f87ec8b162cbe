"""Webhooks (docs/webhooks.md): the teams' URLs told, signed, when their jobs end, audits give a verdict or
budgets pass a threshold.

`signing` (HMAC-SHA256 over `timestamp.body`, the `Smartune-Signature` header), `urls` (http/https only;
loopback, private, link-local, multicast and other non-global addresses refused unless the deployment
allows them; checked at registration and again at each delivery), `registry` (the teams' webhooks and
their deliveries, for the routes), `deliver` (one attempt: resolve once, check, POST to that address),
`notifier` (the engine's step: due deliveries posted off the scheduling loop, retried with exponential
backoff), `budgets` (a team's device-hour budget at 80% and 100%), `schemas` (the REST bodies). The events
themselves are written by the store (service.store.outbox) in the transaction of what they tell.

May import the store, `service.costs` (the budgets), the settings and plain helpers at the service's root
(`config`, `errors`), httpx and the standard library. Never the engine (the engine calls `notifier`) or the
HTTP edge.
"""

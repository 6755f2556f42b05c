"""Five kinds of event with different fields, as one topic carries them: the routing tests'
and the routing benchmark's records (issue 49)."""

from __future__ import annotations

from typing import Any

TYPES = ("orders", "refunds", "clicks", "views", "signups")
# each type's own fields
FIELDS: dict[str, dict[str, Any]] = {
    "orders": {"order_id": 1, "amount": 2.5},
    "refunds": {"order_id": 1, "reason": "late"},
    "clicks": {"page": "/a", "x": 3},
    "views": {"page": "/b", "ms": 120},
    "signups": {"email": "a@b.c"},
}
# the value schema that decodes every type (a field another type lacks is null)
DDL = (
    "event_type string, order_id long, amount double, reason string, page string, x int, "
    "ms long, email string"
)

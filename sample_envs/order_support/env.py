"""order_support: look up an order, check eligibility, change its delivery address.

update_delivery_address is a write: it runs only with an operator's approval receipt, and
the same change never runs twice in one run. notify_customer is a write whose outcome is never
known: the mail gateway takes the message and times out before it confirms, so only the operator
can say whether the mail went (`o` in the console, `loopdeck resolve`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core import Environment, ErrorCode, ToolError, tool


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^ORD-\d+$")


class AddressArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^ORD-\d+$")
    new_address: str = Field(min_length=5, max_length=200)


class NoticeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^ORD-\d+$")
    message: str = Field(min_length=5, max_length=500)


class HandoffArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str
    reason: str = Field(min_length=3)


class OrderSupport(Environment):
    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.orders: dict[str, dict[str, Any]] = copy.deepcopy(data["orders"])
        self.handoffs: list[dict[str, str]] = []
        self.notices: list[dict[str, str]] = []  # handed to the gateway; none confirmed
        self.target_order = data["target_order"]
        self.target_address = data["target_address"]

    def snapshot(self) -> dict[str, Any]:
        return {
            "orders": {
                oid: {"status": o["status"], "address": o["address"]}
                for oid, o in self.orders.items()
            },
            "handoffs": len(self.handoffs),
        }

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        order = snapshot["orders"][self.target_order]
        if order["address"] != self.target_address:
            return [f"{self.target_order} still ships to {order['address']!r}"]
        return []

    def _order(self, order_id: str) -> dict[str, Any]:
        try:
            return self.orders[order_id]
        except KeyError:
            raise ToolError(ErrorCode.NOT_FOUND, f"no order {order_id}") from None

    @tool(args=OrderArgs)
    def get_order(self, args: OrderArgs) -> dict[str, Any]:
        """Read-only status, address and delivery estimate of an order."""
        return {"order_id": args.order_id, **self._order(args.order_id)}

    @tool(args=OrderArgs)
    def check_address_change_eligibility(self, args: OrderArgs) -> dict[str, Any]:
        """Read-only: may this order's delivery address still be changed?"""
        order = self._order(args.order_id)
        eligible = order["status"] in ("processing", "pending")
        return {"order_id": args.order_id, "eligible": eligible, "status": order["status"]}

    @tool(args=AddressArgs, risk="write", idempotency_fields=("order_id", "new_address"))
    def update_delivery_address(self, args: AddressArgs) -> dict[str, Any]:
        """Change the delivery address of an eligible order. Needs the operator's approval."""
        order = self._order(args.order_id)
        if order["status"] not in ("processing", "pending"):
            raise ToolError(ErrorCode.PERMISSION_DENIED, f"{args.order_id} is {order['status']}")
        order["address"] = args.new_address
        return {"order_id": args.order_id, "address": args.new_address}

    @tool(args=NoticeArgs, risk="write")
    def notify_customer(self, args: NoticeArgs) -> dict[str, Any]:
        """Email the customer about their order. Needs the operator's approval."""
        self._order(args.order_id)
        self.notices.append(args.model_dump())
        raise TimeoutError("the mail gateway took the message but sent no receipt within 30 s")

    @tool(args=HandoffArgs, risk="write")
    def create_human_handoff(self, args: HandoffArgs) -> dict[str, Any]:
        """Open a ticket for a human agent."""
        ticket = {"ticket": f"HO-{len(self.handoffs) + 1}", **args.model_dump()}
        self.handoffs.append(ticket)
        return ticket


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return OrderSupport(workdir, data)

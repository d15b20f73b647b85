"""shared_orders: the order desk of order_support, its orders kept in a folder instead of in
the worker's memory, so a run can go on in another worker, on another host that sees the
same folder (`loopdeck submit`, `loopdeck worker`).

`reopen(run_id)` binds the env to the run's own folder under `data.state_root` (a folder
every worker sees; default: LOOPDECK_SHARED_STATE, else the user data dir): made from the
scenario's orders on the run's first start, found again as it was when the run goes on
elsewhere. Each write is appended to the run's `writes.log` as it takes effect (who ran it,
where), so a write that ran twice would show; each call, as it begins, to its `calls.log`.
`restore(snapshot)` puts the folder back in the state a snapshot says (a fork from a step of
another run). Without `reopen` (`loopdeck run`) the orders live in the run's own temporary
workspace.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core import Environment, ErrorCode, ToolError, tool

ORDERS = "orders.json"
WRITES = "writes.log"
CALLS = "calls.log"


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^ORD-\d+$")


class AddressArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^ORD-\d+$")
    new_address: str = Field(min_length=5, max_length=200)


class NoteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^ORD-\d+$")
    text: str = Field(min_length=3, max_length=500)


def state_root(data: dict[str, Any]) -> Path:
    configured = str(data.get("state_root") or os.environ.get("LOOPDECK_SHARED_STATE") or "")
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("loopdeck")) / "shared_orders"


class SharedOrders(Environment):
    state_changes = "by_writes"

    def __init__(self, workdir: Path, data: dict[str, Any]) -> None:
        super().__init__(workdir, data)
        self.folder = workdir
        self.target_order = data["target_order"]
        self.target_address = data["target_address"]
        self.step_s = float(data.get("step_s", 0.0))
        self.run_id = ""
        self.orders: dict[str, dict[str, Any]] = self._seeded()

    def _seeded(self) -> dict[str, dict[str, Any]]:
        orders = copy.deepcopy(self.data["orders"])
        for order in orders.values():
            order.setdefault("notes", [])
        return _as_stored(orders)

    # -- where the state lives ----------------------------------------------------------
    def reopen(self, run_id: str) -> None:
        """The run's orders in its own folder under the shared root: made now on its first
        start, read back as they were when it goes on in another worker."""
        self.run_id = run_id
        self.folder = state_root(self.data) / run_id
        self.folder.mkdir(parents=True, exist_ok=True)
        if (self.folder / ORDERS).exists():
            self.orders = _as_stored(json.loads((self.folder / ORDERS).read_text()))
        else:
            self._save()

    def restore(self, snapshot: dict[str, Any]) -> None:
        """The orders as `snapshot` has them (a fork starts where its source run was);
        `data.restore = false` leaves them as first seeded (a fork whose state differs)."""
        if not self.data.get("restore", True):
            return
        self.orders = _as_stored(snapshot["orders"])
        self._save()

    def _save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{ORDERS}.{os.getpid()}"
        partial.write_text(json.dumps(self.orders, sort_keys=True))
        os.replace(partial, self.folder / ORDERS)

    def _wrote(self, tool_name: str, args: BaseModel, log: str = WRITES) -> None:
        line = {"run": self.run_id, "tool": tool_name, "args": args.model_dump(),
                "host": os.environ.get("LOOPDECK_HOST") or socket.gethostname(),
                "pid": os.getpid(), "at": time.time()}  # fmt: skip
        with (self.folder / log).open("a") as file:
            file.write(json.dumps(line, sort_keys=True) + "\n")

    # -- the goal -----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {"orders": copy.deepcopy(self.orders)}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        order = snapshot["orders"][self.target_order]
        if order["address"] != self.target_address:
            return [f"{self.target_order} still ships to {order['address']!r}"]
        return []

    # -- the tools ----------------------------------------------------------------------
    def _order(self, tool_name: str, args: OrderArgs | AddressArgs | NoteArgs) -> dict[str, Any]:
        self._wrote(tool_name, args, CALLS)
        order_id = args.order_id
        if self.step_s:
            time.sleep(self.step_s)  # the order system is slow: a run takes a while
        try:
            return self.orders[order_id]
        except KeyError:
            raise ToolError(ErrorCode.NOT_FOUND, f"no order {order_id}") from None

    @tool(args=OrderArgs)
    def get_order(self, args: OrderArgs) -> dict[str, Any]:
        """Read-only status, address, notes and delivery estimate of an order."""
        return {"order_id": args.order_id, **self._order("get_order", args)}

    @tool(args=OrderArgs)
    def check_address_change_eligibility(self, args: OrderArgs) -> dict[str, Any]:
        """Read-only: may this order's delivery address still be changed?"""
        order = self._order("check_address_change_eligibility", args)
        eligible = order["status"] in ("processing", "pending")
        return {"order_id": args.order_id, "eligible": eligible, "status": order["status"]}

    @tool(args=NoteArgs, risk="write", idempotency_fields=("order_id", "text"))
    def add_note(self, args: NoteArgs) -> dict[str, Any]:
        """Add a note to an order's history (the customer sees it). A write."""
        order = self._order("add_note", args)
        order["notes"].append(args.text)
        self._save()
        self._wrote("add_note", args)
        return {"order_id": args.order_id, "notes": len(order["notes"])}

    @tool(args=AddressArgs, risk="write", idempotency_fields=("order_id", "new_address"))
    def update_delivery_address(self, args: AddressArgs) -> dict[str, Any]:
        """Change the delivery address of an eligible order. Needs the operator's approval."""
        order = self._order("update_delivery_address", args)
        if order["status"] not in ("processing", "pending"):
            raise ToolError(ErrorCode.PERMISSION_DENIED, f"{args.order_id} is {order['status']}")
        order["address"] = args.new_address
        self._save()
        self._wrote("update_delivery_address", args)
        return {"order_id": args.order_id, "address": args.new_address}


def _as_stored(orders: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The orders as the folder keeps them (keys sorted): the same whether this worker made
    them or read them back, so what a tool shows the model does not depend on which."""
    stored: dict[str, dict[str, Any]] = json.loads(json.dumps(orders, sort_keys=True))
    return stored


def make_env(workdir: Path, data: dict[str, Any]) -> Environment:
    return SharedOrders(workdir, data)

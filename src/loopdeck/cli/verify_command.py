"""`loopdeck verify [RUN_ID]` and `loopdeck verify --export FILE`: a run's log (every run's
in the store, without RUN_ID; an export file's) proven by its hash chain. One line a run:
intact with its last hash, or the first event edited, removed or reordered; events from
before the chain said, never passed as verified (in a store whose `chain_since` is gone, an
event without a hash is a break: every store since schema 5 has it); a run's row that says
another stop than its log, or a fork whose source no longer holds the events it was rebuilt
from, is broken too. Exit 1 when any run is broken."""

from __future__ import annotations

import argparse
import json
import sys

from loopdeck.core.text import visible
from loopdeck.operator import records
from loopdeck.operator.records import RunProof, Store


async def verify(store: Store, args: argparse.Namespace) -> int:
    """The run named (its id or a unique prefix, resolved before), else every run."""
    if args.run_id:
        proofs = [await records.verify_run(store, args.run_id)]
    else:
        proofs = await records.verify_store(store)
    return report(proofs, str(store.path), as_json=args.json)


def verify_export(args: argparse.Namespace) -> int:
    """The runs in an export file; the file alone is read (no store, no run named)."""
    if args.run_id or args.db:
        print(
            "loopdeck: verify --export FILE reads the file alone: give no RUN_ID or --db with it",
            file=sys.stderr,
        )
        return 2
    # A store says when its chain began; a file vouches for no event without a hash.
    proofs = records.verify_export(args.export)
    return report(proofs, str(args.export), as_json=args.json, hashless_fail=True)


def report(
    proofs: list[RunProof], where: str, *, as_json: bool, hashless_fail: bool = False
) -> int:
    """Each run's finding, then the summary; exit 1 when a run is broken, or (`hashless_fail`:
    an export) has events no hash vouches for."""
    for proof in proofs:
        print(visible(_line(proof)))
    broken = [proof for proof in proofs if proof.broken is not None]
    old = [proof for proof in proofs if proof.unchained and proof.broken is None]
    unverified = (
        "without a hash (a file vouches for none (not verified))"
        if hashless_fail
        else "from before the chain (not verified)"
    )
    summary = (
        f"{len(proofs)} run{'' if len(proofs) == 1 else 's'} in {where}:"
        f" {len(proofs) - len(broken) - len(old)} intact, {len(broken)} broken"
        f" (an event edited, removed or reordered), {len(old)} with events {unverified}"
    )
    print(visible(summary if proofs else f"no runs in {where}: nothing to verify"))
    failed = bool(broken) or (hashless_fail and bool(old))
    if as_json:
        runs = [proof.as_json() for proof in proofs]
        print(json.dumps({"intact": not failed, "runs": runs}))
    return 1 if failed else 0


def _line(proof: RunProof) -> str:
    line = _found(proof)
    return line if proof.lineage is None or proof.broken else f"{line} ({proof.lineage})"


def _found(proof: RunProof) -> str:
    run = proof.run_id
    if proof.broken is not None:
        found = proof.broken
        return f"{run}: event {found.seq} {found.what}: {found.detail}"
    if not proof.events:
        return f"{run}: no events"
    last = f"its last event {proof.events} hashed {proof.head}"
    if not proof.stopped and proof.whole:  # an export that said how far it goes
        last += " (not the run's stop: the run went on past the export)"
    elif not proof.stopped:
        last += " (not the run's stop: the run goes on, or its last events were cut off)"
    if not proof.unchained:
        return f"{run}: intact: {proof.events} events, {last}"
    first = "event 1 is" if proof.unchained == 1 else f"events 1 to {proof.unchained} are"
    before = f"{first} from before the chain began: not verified"
    if not proof.verified:
        return f"{run}: {before}"
    return f"{run}: intact from event {proof.unchained + 1} ({before}), {last}"

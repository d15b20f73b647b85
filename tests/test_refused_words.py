"""What an agent is told of a write that did not run says who decided, in every kind of run
(the gateway's, an ACP agent's permission, file write and terminal): the operator's reason
as theirs, a policy rule's or `--approve deny`'s refusal in its own words."""

from __future__ import annotations

from loopdeck.core.decided_by import DecidedBy, refused_words


def test_the_operators_reason_is_theirs() -> None:
    by = DecidedBy(who="operator", channel="console")
    said = refused_words("write_file", by, "not now")
    assert said == "the operator rejected write_file; it was not run. Their reason: not now"


def test_a_rules_refusal_is_never_the_operators() -> None:
    by = DecidedBy(who="rule", rule_id="no-writes")
    said = refused_words("write_file", by, "denied by policy rule no-writes: read-only")
    assert said == "write_file was not run: denied by policy rule no-writes: read-only"
    assert "operator" not in refused_words("`rm -rf x`", DecidedBy(who="default"), "denied")

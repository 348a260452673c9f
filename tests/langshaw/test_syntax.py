"""Every syntax form the language accepts, and the model it builds."""

from __future__ import annotations

from typing import Any

import pytest

from langshaw import LangshawProtocol, LangshawSyntaxError
from tests.conftest import FIXTURES, PROTOCOLS

MINIMAL = """\
Tiny
who A
what id key, Go
do
  A : Go(id)
"""


def test_name_may_contain_spaces() -> None:
    protocol = LangshawProtocol.parse(MINIMAL.replace("Tiny", "Tiny Protocol v2"))
    assert protocol.name == "Tiny Protocol v2"


def test_clauses_in_any_order_with_optional_colons_and_content_on_the_keyword_line() -> None:
    text = """\
Reordered
nogo: Stop -/> Go
do: A : Go(id, x)
  A : Stop(id)
sayso:
  A : x
what: id key
  Go or Stop
who: A
nono Go Stop
"""
    protocol = LangshawProtocol.parse(text)
    assert protocol.roles == ("A",)
    assert protocol.keys == ("id",)
    assert protocol.completion == (("Go", "Stop"),)
    assert list(protocol.actions) == ["Go", "Stop"]
    assert protocol.nono == (("Go", "Stop"),)
    assert protocol.nogo == (("Stop", "Go"),)


def test_what_keys_or_and_several_clauses() -> None:
    text = """\
Goals
who A, B
what id key, sub key, Done or Failed, note
do
  A : Start(id, note)
  B : Done(id, sub, Start)
  B : Failed(id, Start)
sayso
  A : note
"""
    protocol = LangshawProtocol.parse(text)
    assert protocol.keys == ("id", "sub")
    assert protocol.root_keys == ("id",)
    assert protocol.completion == (("Done", "Failed"), ("note",))


def test_attribute_lists_wrap_across_lines_inside_parentheses() -> None:
    text = """\
Wrapped
who A
what id key, Go
do
  A : Go(id ,
    a ,
    b
    , c)
sayso
  A : a , b ,
    c
"""
    protocol = LangshawProtocol.parse(text)
    assert protocol.action("Go").attributes == ("id", "a", "b", "c")
    assert protocol.sayso["c"] == ("A",)


def test_priority_chains_may_wrap() -> None:
    text = """\
Chains
who Buyer, Seller, Shipper
what id key, Ship
do
  Buyer : Order(id, item)
  Seller : Ship(id, Order, item, date)
sayso
  Buyer >
    Seller : item
  Shipper > Seller >
    Buyer :
      date
"""
    protocol = LangshawProtocol.parse(text)
    assert protocol.sayso["item"] == ("Buyer", "Seller")
    assert protocol.sayso["date"] == ("Shipper", "Seller", "Buyer")


def test_nono_lines_hold_two_or_more_names_and_each_line_is_a_group() -> None:
    text = """\
Exclusive
who A
what id key, X or Y or Z
do
  A : X(id)
  A : Y(id)
  A : Z(id)
nono
  X Y Z
  X, Z
"""
    protocol = LangshawProtocol.parse(text)
    assert protocol.nono == (("X", "Y", "Z"), ("X", "Z"))


def test_nono_line_with_one_name_is_a_syntax_error() -> None:
    text = MINIMAL + "nono\n  Go\n"
    with pytest.raises(LangshawSyntaxError) as caught:
        LangshawProtocol.parse(text, source="one.lsh")
    assert str(caught.value) == "one.lsh:7:5: expected ',' or a name but found the end of the line"


def test_comments_document_actions_above_or_at_the_end_of_the_line() -> None:
    text = """\
Documented
# not a doc: the protocol's description
who A
what id key, Go
do
  # Start things.
  # Two lines of doc.
  A : Start(id)
  A : Go(id, Start)  # Finish them.

  # Separated from Stop by a blank line, so not its doc.

  A : Stop(id,
    Start)  # Also a doc: comments on any line of the action count.
"""
    protocol = LangshawProtocol.parse(text)
    assert protocol.action("Start").doc == "Start things.\nTwo lines of doc."
    assert protocol.action("Go").doc == "Finish them."
    assert protocol.action("Stop").doc == ("Also a doc: comments on any line of the action count.")


def test_model_is_immutable() -> None:
    protocol = LangshawProtocol.parse(MINIMAL)
    with pytest.raises(AttributeError):
        protocol.name = "Other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        protocol.actions["Extra"] = protocol.action("Go")  # type: ignore[index]
    with pytest.raises(TypeError):
        protocol.sayso["x"] = ("A",)  # type: ignore[index]


def test_unknown_action_lookup_names_the_known_ones() -> None:
    protocol = LangshawProtocol.parse(MINIMAL)
    with pytest.raises(KeyError, match="Tiny has no action 'Stop' \\(actions: Go\\)"):
        protocol.action("Stop")


# What the shipped files add to the paper's listings besides types: UCP's rule
# that a checkout is completed or cancelled, never both (and so in SimpleUCP a
# Cancel ends the checkout, or a cancelled one could never complete). In
# IncrementalUCP that takes Complete, Completed, Cancel and Cancelled out of the
# versions (no v; and no messages, which Created binds in the root scope), the
# nono replaces the nogo, and a StatusChange (a Complete the merchant cannot say
# as Completed) ends the checkout, since the Platform may not cancel it then.
DOMAIN_RULES: dict[str, dict[str, Any]] = {
    "atomic-ucp.lsh": {
        "completion": (("Completed", "Failed", "Cancel"),),
        "nono": (("Complete", "Cancel"),),
    },
    "incremental-ucp.lsh": {
        "completion": (("Completed", "Cancelled", "StatusChange"),),
        "nono": (("Complete", "Cancel"),),
        "nogo": (),
        "attributes": {
            "Complete": ("eid", "Create", "id", "payment_data", "risk_signals"),
            "Completed": ("eid", "Complete", "order"),
            "Cancel": ("eid", "Created", "id"),
            "Cancelled": ("eid", "Cancel"),
        },
    },
}


@pytest.mark.parametrize("name", ["atomic-ucp.lsh", "incremental-ucp.lsh"])
def test_paper_listings_parse_as_printed(name: str) -> None:
    """Listings 3 and 9 of the Strabo paper, spaces around commas and colons
    included; the shipped files are the same protocols with UCP types, and mean
    the same but for them and the domain rules above."""
    text = (FIXTURES / "lsh" / "paper" / name).read_text()
    assert " , " in text and " : " in text
    printed = LangshawProtocol.parse(text, source=name)
    assert printed.warnings == () and printed.types == {}
    typed = LangshawProtocol.load(PROTOCOLS / name)
    assert typed.warnings == () and typed.types
    assert typed.name == printed.name and typed.roles == printed.roles
    added = DOMAIN_RULES.get(name, {})
    assert typed.keys == printed.keys
    assert typed.completion == added.get("completion", printed.completion)
    assert typed.sayso == printed.sayso
    assert typed.nono == printed.nono + added.get("nono", ())
    assert typed.nogo == added.get("nogo", printed.nogo)
    changed = added.get("attributes", {})
    assert [(a.name, a.actor, a.attributes) for a in typed.actions.values()] == [
        (a.name, a.actor, changed.get(a.name, a.attributes)) for a in printed.actions.values()
    ]


def test_simple_ucp_model(simple_ucp: LangshawProtocol) -> None:
    assert simple_ucp.name == "SimpleUCP"
    assert simple_ucp.roles == ("Platform", "Business")
    assert simple_ucp.keys == ("cid",)
    assert simple_ucp.completion == (("Completed", "Failed", "Cancel"),)
    create = simple_ucp.action("Create")
    assert create.actor == "Platform"
    assert create.attributes == (
        "cid",
        "line_items",
        "currency",
        "buyer",
        "payment_pref",
        "discount_codes",
        "fulfillment_pref",
    )
    assert simple_ucp.action("Created").dependencies == ("Create",)
    assert simple_ucp.sayso["order"] == ("Business",)
    assert simple_ucp.nono == (
        ("Completed", "Failed"), ("Created", "Failed"), ("Complete", "Cancel")
    )


def test_incremental_ucp_model(incremental_ucp: LangshawProtocol) -> None:
    assert incremental_ucp.keys == ("eid", "v")
    assert incremental_ucp.root_keys == ("eid",)
    assert incremental_ucp.action("Update").keys == ("eid", "v")
    assert incremental_ucp.action("Shipped").keys == ("eid",)
    assert incremental_ucp.action("Complete").keys == ("eid",)  # once per checkout
    assert incremental_ucp.nono == (("Completed", "Cancelled"), ("Complete", "Cancel"))
    assert incremental_ucp.nogo == ()


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in PROTOCOLS.glob("*.lsh")),
)
def test_every_shipped_protocol_is_valid_without_warnings(name: str) -> None:
    protocol = LangshawProtocol.load(PROTOCOLS / name)
    assert protocol.warnings == ()
    assert all(a.doc for a in protocol.actions.values()) or name.endswith("ucp.lsh")


def test_load_reports_unreadable_files(tmp_path) -> None:
    from langshaw import LangshawError

    with pytest.raises(LangshawError, match=r"missing\.lsh:1:1: cannot read: No such file"):
        LangshawProtocol.load(tmp_path / "missing.lsh")
    binary = tmp_path / "binary.lsh"
    binary.write_bytes(b"Name\n\xff\xfe")
    with pytest.raises(LangshawError, match=r"binary\.lsh:2:1: not UTF-8 text"):
        LangshawProtocol.load(binary)

"""What a model is told to bind: the types and optionality of the protocol."""

from __future__ import annotations

from langshaw import LangshawProtocol
from peach import LocalExecutor, PeachAdapter
from peach.llm.prompting import Offer, Redactor
from syncserver import SyncServer
from tests.conftest import FIXTURES

ORDER = LangshawProtocol.load(FIXTURES / "lsh" / "typed" / "order.lsh")


async def test_tool_schema_carries_types_schemas_and_optionality() -> None:
    server = SyncServer.embedded([ORDER], {"buyer": ["Buyer"]})
    buyer = PeachAdapter("buyer", ORDER, "Buyer", LocalExecutor(server))
    async with buyer:
        [order] = buyer.initiating()
        offer = Offer("Order", buyer, order, "new", order.to_bind)
        schema = offer.spec(Redactor(), has_events=False)["input_schema"]
    assert schema["required"] == ["items"]  # note and gift are optional
    properties = schema["properties"]
    # A schema by reference arrives self-contained, its $refs inlined.
    items = properties["items"]
    assert items["type"] == "array" and items["minItems"] == 1
    assert items["items"]["properties"]["sku"]["pattern"] == "^[A-Z]{3}-[0-9]+$"
    assert items["description"].startswith("items (attribute of Order): ")
    assert "$ref" not in repr(schema)
    assert properties["note"]["type"] == "string"
    assert "Optional: leave it out to leave it absent." in properties["note"]["description"]
    assert set(properties["gift"]) == {"description"}  # optional, of any type

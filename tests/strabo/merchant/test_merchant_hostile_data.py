"""The bundled merchant's input, attacked: CSV shop data and testing endpoints.

The promises: bad CSV data is a one-line error naming ``FILE:LINE``, and
``strabo merchant --data-dir`` exits 2 with it, never a traceback; a testing
endpoint refuses bad input with a 400/403/404/409 and leaves the state as it was.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from strabo.merchant import CatalogError, load_data_dir

from .conftest import SIMULATION_SECRET, Shop
from .shopper import line

SHOP = Path(__file__).resolve().parents[2] / "fixtures" / "merchant_csv_shop"
SECRET = {"Simulation-Secret": SIMULATION_SECRET}
ROSES = "bouquet_roses"
DEEP = "[" * 100_000  # nesting Python's JSON parser gives up on with RecursionError


def shop_with(tmp_path: Path, name: str, text: str, *, append: bool = False) -> Path:
    """The tea shop fixture, with ``name`` replaced (or appended to) by ``text``."""
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    with (shop / name).open("a" if append else "w", encoding="utf-8", newline="") as file:
        file.write(text)
    return shop


def refused(shop: Path) -> str:
    """The loader's one-line refusal of ``shop``."""
    with pytest.raises(CatalogError) as error:
        load_data_dir(shop)
    message = str(error.value)
    assert "\n" not in message
    return message


# CSV data --------------------------------------------------------------------------------

PROMOTIONS = "id,type,eligible_item_ids\n"


@pytest.mark.parametrize(("name", "text", "where"), [
    ("products.csv", "mug2,Mug,-0.5,\n", "products.csv:6:"),
    ("products.csv", 'mug2,"Mug,1,\n', "products.csv:6:"),
    ("inventory.csv", "mug,1\n", "inventory.csv:"),
    ("promotions.csv", PROMOTIONS + 'p,free_shipping,"[1]"\n', "promotions.csv:2:"),
    ("promotions.csv", PROMOTIONS + 'p,free_shipping,"{""a"": 1}"\n', "promotions.csv:2:"),
    ("promotions.csv", PROMOTIONS + "p,free_shipping,[\n", "promotions.csv:2:"),
    ("discounts.csv", "code,type,value,description\nX,percentage,1e2,d\n", "discounts.csv:2:"),
], ids=["negative-fraction", "open-quote", "second-inventory", "ids-not-strings",
        "ids-an-object", "ids-broken-json", "value-exponent"])
def test_bad_data_is_one_line_with_file_and_line(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    append = not text.startswith(("id,", "code,"))
    message = refused(shop_with(tmp_path, name, text, append=append))
    assert where in message, message


def test_deeply_nested_eligible_item_ids_is_a_catalog_error(tmp_path: Path) -> None:
    shop = shop_with(tmp_path, "promotions.csv", PROMOTIONS + f'p,free_shipping,"{DEEP}"\n')
    assert "promotions.csv:2:" in refused(shop)


def test_a_huge_number_in_eligible_item_ids_is_a_catalog_error(tmp_path: Path) -> None:
    shop = shop_with(tmp_path, "promotions.csv",
                     PROMOTIONS + f'p,free_shipping,"[{"1" * 5000}]"\n')
    assert "promotions.csv:2:" in refused(shop)


def test_an_oversized_field_names_its_own_line(tmp_path: Path) -> None:
    shop = shop_with(tmp_path, "products.csv", f"big,{'T' * 200_000},5,\n", append=True)
    assert "products.csv:6:" in refused(shop)  # the fixture has a header and 4 rows


def test_a_byte_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    shop = shop_with(tmp_path, "products.csv", "", append=True)
    with (shop / "products.csv").open("ab") as file:
        file.write(b"caf\xe9,Caf\xe9,5,\n")
    assert "products.csv:6:" in refused(shop)


def test_the_command_line_never_shows_a_traceback(tmp_path: Path) -> None:
    shop = shop_with(tmp_path, "promotions.csv", PROMOTIONS + f'p,free_shipping,"{DEEP}"\n')
    done = subprocess.run(
        [sys.executable, "-m", "strabo.cli", "merchant", "--data-dir", str(shop), "--port", "0"],
        capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr[-500:]
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


# Testing endpoints -----------------------------------------------------------------------


async def ready(shop: Shop) -> str:
    checkout: str = (await shop.shopper.ship_ready(line(ROSES)))["id"]
    return checkout


async def completes_plainly(shop: Shop, checkout: str) -> None:
    """The state was left alone: no rig, the session open, the complete goes through."""
    answer = await shop.shopper.complete(checkout)
    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text


@pytest.mark.parametrize(("what", "body", "status"), [
    ("decline", {"code": ""}, 400),
    ("decline", {"code": 402}, 400),
    ("decline", {"code": "X", "extra": 1}, 400),
    ("decline", [], 400),
    ("escalate", {"continue_url": None}, 400),
    ("escalate", {"message": ["a"]}, 400),
    ("expire", {"why": "x"}, 400),
    ("expire", "null", 400),
    ("decline", "{not json", 400),
    ("escalate", "\xff\xfe", 400),
])
async def test_a_bad_body_is_refused_and_leaves_the_session_alone(
    shop: Shop, what: str, body: Any, status: int
) -> None:
    checkout = await ready(shop)
    path = f"/testing/checkout-sessions/{checkout}/{what}"
    if isinstance(body, str):
        answer = await shop.client.post(path, content=body.encode("latin-1"), headers=SECRET)
    else:
        answer = await shop.client.post(path, json=body, headers=SECRET)
    assert answer.status_code == status, answer.text
    await completes_plainly(shop, checkout)


@pytest.mark.parametrize("headers", [{}, {"Simulation-Secret": "wrong"},
                                     {"Simulation-Secret": SIMULATION_SECRET + "x"}])
async def test_without_the_secret_nothing_is_rigged(shop: Shop, headers: dict[str, str]) -> None:
    checkout = await ready(shop)
    for what in ("decline", "escalate", "expire"):
        answer = await shop.client.post(f"/testing/checkout-sessions/{checkout}/{what}",
                                        headers=headers)
        assert answer.status_code == 403
    stock = shop.merchant.stock(ROSES)
    answer = await shop.client.put(f"/testing/inventory/{ROSES}", json={"quantity": 0},
                                   headers=headers)
    assert answer.status_code == 403 and shop.merchant.stock(ROSES) == stock
    await completes_plainly(shop, checkout)


@pytest.mark.parametrize("quantity", [-1, 1.5, True, "3", None, 1e400])
async def test_a_bad_quantity_leaves_the_stock(shop: Shop, quantity: Any) -> None:
    stock = shop.merchant.stock(ROSES)
    body = f'{{"quantity": {"1e400" if quantity == 1e400 else repr(quantity)}}}'
    body = body.replace("True", "true").replace("None", "null").replace("'", '"')
    answer = await shop.client.put(f"/testing/inventory/{ROSES}", content=body, headers=SECRET)
    assert answer.status_code == 400, answer.text
    assert shop.merchant.stock(ROSES) == stock


async def test_unknown_and_ended_sessions_are_404_and_409(shop: Shop) -> None:
    for what in ("decline", "escalate", "expire"):
        answer = await shop.client.post(f"/testing/checkout-sessions/nope/{what}", headers=SECRET)
        assert answer.status_code == 404
    checkout = await ready(shop)
    await completes_plainly(shop, checkout)
    order_count = len(shop.merchant.orders())
    for what in ("decline", "escalate", "expire"):
        answer = await shop.client.post(f"/testing/checkout-sessions/{checkout}/{what}",
                                        headers=SECRET)
        assert answer.status_code == 409
    assert shop.merchant.checkout(checkout).status == "completed"  # type: ignore[union-attr]
    assert len(shop.merchant.orders()) == order_count


@pytest.mark.parametrize("target", ["inventory", "expire"])
async def test_a_deeply_nested_body_is_a_400(shop: Shop, target: str) -> None:
    checkout = await ready(shop)
    stock = shop.merchant.stock(ROSES)
    if target == "inventory":
        answer = await shop.client.put(f"/testing/inventory/{ROSES}", content=DEEP,
                                       headers=SECRET)
    else:
        answer = await shop.client.post(f"/testing/checkout-sessions/{checkout}/expire",
                                        content=DEEP, headers=SECRET)
    assert answer.status_code == 400, answer.status_code
    assert shop.merchant.stock(ROSES) == stock
    await completes_plainly(shop, checkout)


@pytest.mark.parametrize("url", ["not a url", "/relative/path"])
async def test_escalate_refuses_a_continue_url_that_is_no_url(shop: Shop, url: str) -> None:
    checkout = await ready(shop)
    answer = await shop.client.post(f"/testing/checkout-sessions/{checkout}/escalate",
                                    json={"continue_url": url}, headers=SECRET)
    assert answer.status_code == 400, answer.text
    await completes_plainly(shop, checkout)

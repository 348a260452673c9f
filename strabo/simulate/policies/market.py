"""Policies for the Market pattern (``protocols/patterns/market.lsh``).

* :func:`market` coordinates: opens rounds, calls the sellers (all at once, or
  one after the other with ``simultaneous = false``), posts the price list,
  clears the round once every buyer has bought or passed, settles each seller
  (units, revenue, profit at ``cost`` a unit, running balance), and closes the
  market after the round limit.
* Sellers price only their own call (the ``seller`` key is their name):
  :func:`fixed` keeps one price; :func:`undercut` undercuts the cheapest rival
  by ``step`` until that would go below ``floor``, then starts again at
  ``start`` (an Edgeworth price cycle); :func:`follow` matches the cheapest
  rival, never below ``floor``. They read rivals' prices from the last posted
  list; with ``react = true`` (for a market that calls in turn) they read the
  prices already given this round when there are any.
* :func:`cheapest` is a buyer of the population: it buys from the cheapest
  seller if the price is within its reservation value, which spreads evenly
  from ``low`` (the first buyer) to ``high`` (the last); buyers split evenly
  between sellers that tie.
"""

from __future__ import annotations

from typing import Any

from strabo.simulate.move import Move
from strabo.simulate.policies._common import may_close, open_round

__all__ = ["cheapest", "fixed", "follow", "market", "undercut"]


def market(move: Move) -> dict[str, Any] | None:
    sellers = list(move.population.get("Seller", ()))
    cost = float(move.params.get("cost", 2.0))
    if move.name == "Open":
        return open_round(move, "Settle", {"cost": cost}, done=len(sellers))
    if move.name == "Closed":
        if not may_close(move, "Settle", done=len(sellers)):
            return None
        balances = {
            o["seller"]: o["balance"] for o in move.occurred("Settle")
        }
        return {"balances": balances}
    r = move.keys.get("round")
    if r is None:
        return None
    if move.name == "Call":
        called = [o["seller"] for o in move.occurred("Call", round=r)]
        waiting = [s for s in sellers if s not in called]
        priced = {o["seller"] for o in move.occurred("Price", round=r)}
        if not waiting:
            return None
        if not move.params.get("simultaneous", True) and not set(called) <= priced:
            return None  # in turn: the previous seller has not priced yet
        return move.at(seller=waiting[0])
    if move.name == "Post":
        prices = {o["seller"]: o["price"] for o in move.occurred("Price", round=r)}
        return {"prices": prices} if set(prices) >= set(sellers) else None
    if move.name == "Clear":
        buyers = len(move.population.get("Buyer", ()))
        acted = move.occurred("Buy", round=r) + move.occurred("Pass", round=r)
        if len({o["buyer"] for o in acted}) < buyers:
            return None
        sales = {s: 0 for s in sellers}
        for o in move.occurred("Buy", round=r):
            sales[o["choice"]] = sales.get(o["choice"], 0) + 1
        return {"sales": sales}
    if move.name == "Settle":
        seller = move.keys["seller"]
        price = float(move.fixed["price"])
        [cleared] = move.occurred("Clear", round=r)
        units = int(cleared["sales"].get(seller, 0))
        before = [o for o in move.occurred("Settle", seller=seller) if o["round"] < r]
        balance = before[-1]["balance"] if before else 0.0
        profit = round(units * (price - cost), 2)
        return {"units": units, "revenue": round(units * price, 2), "profit": profit,
                "balance": round(balance + profit, 2)}
    return None


def _my_call(move: Move) -> int | None:
    """The round, when this is a Price in this seller's own call."""
    if move.name != "Price" or move.keys.get("seller") != move.agent:
        return None
    return int(move.keys["round"])


def _rivals(move: Move, r: int) -> dict[str, float]:
    """Rivals' prices: this round's when ``react`` and some are given, else
    the last posted list's."""
    if move.params.get("react", False):
        now = {o["seller"]: float(o["price"]) for o in move.occurred("Price", round=r)
               if o["seller"] != move.agent}
        if now:
            return now
    posted = [o for o in move.occurred("Post") if o["round"] < r]
    if not posted:
        return {}
    return {s: float(p) for s, p in posted[-1]["prices"].items() if s != move.agent}


def fixed(move: Move) -> dict[str, Any] | None:
    if _my_call(move) is None:
        return None
    return {"price": float(move.params.get("price", 5.0))}


def undercut(move: Move) -> dict[str, Any] | None:
    r = _my_call(move)
    if r is None:
        return None
    start = float(move.params.get("start", 10.0))
    step = float(move.params.get("step", 1.0))
    floor = float(move.params.get("floor", 3.0))
    rivals = _rivals(move, r)
    if not rivals:
        return {"price": start}
    target = round(min(rivals.values()) - step, 2)
    return {"price": target if target >= floor else start}


def follow(move: Move) -> dict[str, Any] | None:
    r = _my_call(move)
    if r is None:
        return None
    start = float(move.params.get("start", 8.0))
    floor = float(move.params.get("floor", 3.0))
    rivals = _rivals(move, r)
    if not rivals:
        return {"price": start}
    return {"price": max(floor, min(rivals.values()))}


def cheapest(move: Move) -> dict[str, Any] | None:
    if move.name not in ("Buy", "Pass"):
        return None
    placed = move.at(buyer=move.agent)
    r = move.keys.get("round")
    if placed is None or r is None or move.occurred("Clear", round=r):
        return None
    low = float(move.params.get("low", 3.0))
    high = float(move.params.get("high", 12.0))
    share = move.index / (move.count - 1) if move.count > 1 else 1.0
    reservation = low + (high - low) * share
    prices: dict[str, float] = move.fixed["prices"]
    price = min(prices.values())
    tied = sorted(s for s, p in prices.items() if p == price)
    seller = tied[move.index % len(tied)]  # buyers split evenly between equal prices
    buying = price <= reservation
    if move.name == "Buy":
        return {**placed, "choice": seller} if buying else None
    return placed if not buying else None

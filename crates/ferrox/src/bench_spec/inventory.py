"""A small inventory tracker: items, stock movements and a text report."""

from dataclasses import dataclass, field
from datetime import date
from typing import Dict, List, Optional


@dataclass
class Item:
    sku: str
    name: str
    unit_price: float
    reorder_level: int = 5
    tags: List[str] = field(default_factory=list)


@dataclass
class Movement:
    sku: str
    quantity: int
    day: date
    note: str = ""


class Inventory:
    def __init__(self) -> None:
        self.items: Dict[str, Item] = {}
        self.stock: Dict[str, int] = {}
        self.history: List[Movement] = []

    def add_item(self, item: Item) -> None:
        if item.sku in self.items:
            raise ValueError(f"duplicate sku {item.sku}")
        self.items[item.sku] = item
        self.stock[item.sku] = 0

    def remove_item(self, sku: str) -> Item:
        item = self.items.pop(sku)
        self.stock.pop(sku, None)
        return item

    def receive(self, sku: str, quantity: int, day: date, note: str = "") -> None:
        if quantity <= 0:
            raise ValueError("received quantity must be positive")
        self._require(sku)
        self.stock[sku] += quantity
        self.history.append(Movement(sku, quantity, day, note))

    def ship(self, sku: str, quantity: int, day: date, note: str = "") -> None:
        if quantity <= 0:
            raise ValueError("shipped quantity must be positive")
        self._require(sku)
        if self.stock[sku] < quantity:
            raise ValueError(f"only {self.stock[sku]} of {sku} in stock")
        self.stock[sku] -= quantity
        self.history.append(Movement(sku, -quantity, day, note))

    def _require(self, sku: str) -> None:
        if sku not in self.items:
            raise KeyError(f"unknown sku {sku}")

    def value_of(self, sku: str) -> float:
        item = self.items[sku]
        return item.unit_price * self.stock[sku]

    def total_value(self) -> float:
        return sum(self.value_of(sku) for sku in self.items)

    def low_stock(self) -> List[Item]:
        return [
            item
            for sku, item in self.items.items()
            if self.stock[sku] <= item.reorder_level
        ]

    def movements_for(self, sku: str, since: Optional[date] = None) -> List[Movement]:
        return [
            m
            for m in self.history
            if m.sku == sku and (since is None or m.day >= since)
        ]

    def tagged(self, tag: str) -> List[Item]:
        return [item for item in self.items.values() if tag in item.tags]


def parse_line(line: str) -> Optional[Item]:
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 3:
        raise ValueError(f"expected sku, name, price: {line!r}")
    sku, name, price = parts[0], parts[1], float(parts[2])
    reorder = int(parts[3]) if len(parts) > 3 and parts[3] else 5
    tags = parts[4].split(";") if len(parts) > 4 and parts[4] else []
    return Item(sku, name, price, reorder, tags)


def load_catalog(text: str) -> Inventory:
    inventory = Inventory()
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            item = parse_line(line)
        except ValueError as error:
            raise ValueError(f"line {number}: {error}") from error
        if item is not None:
            inventory.add_item(item)
    return inventory


def format_money(amount: float) -> str:
    return f"{amount:,.2f}"


def report(inventory: Inventory) -> str:
    lines = ["SKU       NAME                      STOCK      VALUE"]
    for sku in sorted(inventory.items):
        item = inventory.items[sku]
        stock = inventory.stock[sku]
        value = format_money(inventory.value_of(sku))
        lines.append(f"{sku:<9} {item.name:<25} {stock:>5} {value:>10}")
    lines.append("")
    lines.append(f"Total value: {format_money(inventory.total_value())}")
    low = inventory.low_stock()
    if low:
        names = ", ".join(item.name for item in low)
        lines.append(f"Reorder soon: {names}")
    return "\n".join(lines)


CATALOG = """
# sku, name, price, reorder level, tags
A-100, Steel bolts (box of 50), 4.20, 10, hardware;metal
A-101, Steel nuts (box of 50), 3.10, 10, hardware;metal
B-200, Oak plank 2m, 18.50, 4, wood
B-201, Pine plank 2m, 9.75, 6, wood
C-300, Wood glue 250ml, 6.40, 3, adhesive
C-301, Epoxy kit, 12.90, 2, adhesive
D-400, Sandpaper assortment, 7.25, 5, abrasive
"""


def demo() -> None:
    inventory = load_catalog(CATALOG)
    today = date(2026, 3, 14)
    inventory.receive("A-100", 40, today, "opening stock")
    inventory.receive("B-200", 6, today, "opening stock")
    inventory.receive("C-300", 12, today, "opening stock")
    inventory.ship("A-100", 35, today, "order 1183")
    inventory.ship("B-200", 3, today, "order 1184")
    print(report(inventory))
    for movement in inventory.movements_for("A-100"):
        print(movement.day, movement.quantity, movement.note)


if __name__ == "__main__":
    demo()

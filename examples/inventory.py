"""A small inventory module: the demo completes code inside it."""

from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0
    tags: list[str] = field(default_factory=list)

    def total_value(self) -> float:
        return self.price * self.quantity


class Inventory:
    def __init__(self) -> None:
        self.items: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        self.items[item.name] = item

    def remove(self, name: str) -> Item:
        return self.items.pop(name)

    def total_value(self) -> float:
        

    def cheapest(self) -> Item | None:
        if not self.items:
            return None
        return min(self.items.values(), key=lambda item: item.price)


def main() -> None:
    inventory = Inventory()
    inventory.add(Item("apple", 0.5, 10))
    inventory.add(Item("pear", 0.75, 4))
    print(inventory.total_value())


if __name__ == "__main__":
    main()

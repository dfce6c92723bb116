"""Token use: each model call's tokens recorded per chat and purpose, `/usage`, and what
`nanomem usage` reads (docs/usage.md)."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.usage.feature import UsageMeter, build
    from nanomem.features.usage.ledger import Record, read_since
    from nanomem.features.usage.prices import Price, PriceTable, price_table
    from nanomem.features.usage.report import Daily, Pricing, Totals, chat_usage, daily, dollars

__all__ = [
    "Daily",
    "Price",
    "PriceTable",
    "Pricing",
    "Record",
    "Totals",
    "UsageMeter",
    "build",
    "chat_usage",
    "daily",
    "dollars",
    "price_table",
    "read_since",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "feature": ("UsageMeter", "build"),
        "ledger": ("Record", "read_since"),
        "prices": ("Price", "PriceTable", "price_table"),
        "report": ("Daily", "Pricing", "Totals", "chat_usage", "daily", "dollars"),
    },
)

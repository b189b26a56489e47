"""The dropout schemes by name: each module of vdrnn/dropout/schemes/ enters its scheme with ``@register``.

`vdrnn.dropout` imports every module of that folder, so a new scheme is found without being listed anywhere else;
the config checks (which sites a scheme reads, which cells it runs on), the report's order and ``make_dropout`` all
read this one registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vdrnn.dropout.config import DropoutConfig
    from vdrnn.dropout.scheme import DropoutScheme

SCHEMES: dict[str, type[DropoutScheme]] = {}  # name -> scheme class


def register(cls: type[DropoutScheme]) -> type[DropoutScheme]:
    """Class decorator: make ``cls`` the scheme that ``dropout.scheme=<cls.name>`` runs."""
    if cls.name in SCHEMES:
        raise ValueError(f"two dropout schemes are named {cls.name!r}: {SCHEMES[cls.name].__name__} and {cls.__name__}")
    SCHEMES[cls.name] = cls
    return cls


def in_table_order() -> list[str]:
    """The schemes' names in the order the report's tables list them (each scheme's ``table_order``)."""
    return sorted(SCHEMES, key=lambda name: SCHEMES[name].table_order)


def make_dropout(config: DropoutConfig) -> DropoutScheme:
    """The scheme ``config.scheme`` names, drawing its masks with ``config``'s probabilities."""
    return SCHEMES[config.scheme](config)

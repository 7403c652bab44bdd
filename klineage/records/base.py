"""What every record shares: the number type that keeps an int an int, the two model bases, and
the one serialiser (``to_plain`` / ``to_json``)."""
from __future__ import annotations

import json
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr

# A measured or configured number as it was written: 1 stays 1 and 1.0 stays 1.0 (the stored JSON
# and every hash over it depend on that); a bool is not a number.
Number = Union[StrictInt, StrictFloat]
Scalar = Union[StrictStr, StrictInt, StrictFloat, StrictBool]


class Closed(BaseModel):
    """A record whose keys are all named: an unknown key is an error."""
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Open(BaseModel):
    """A record with named keys that also keeps, as given, keys that only some producers write
    (a probe's name on a precondition, a gate status on a risk)."""
    model_config = ConfigDict(extra="allow", validate_assignment=True)


def to_plain(record: BaseModel | dict) -> dict:
    """A record as plain JSON-able data: the keys it was given (an optional key never set stays
    absent, one set to None stays None), in field order, nested records included. A plain dict
    passes through unchanged."""
    if isinstance(record, BaseModel):
        return record.model_dump(mode="python", exclude_unset=True)
    return record


def to_json(record: BaseModel | dict) -> str:
    """The JSON the store writes for a record: ``json.dumps(..., sort_keys=True)``."""
    return json.dumps(to_plain(record), sort_keys=True)


def plain(value: Any) -> Any:
    """`value` with every record inside it made plain (lists and dicts walked)."""
    if isinstance(value, BaseModel):
        return to_plain(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value

"""What every repository of the store shares: JSON and time encoding, and the Repository base.

A repository holds the Store it belongs to and reaches the database only through the Store's
``_write`` (one transaction) and ``_query``; it never imports the Store, so the store's modules
form no import circle.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ValidationError

from klineage.errors import StoreError


def dumps(obj: Any) -> str:
    """The JSON the store keeps in a *_json column (keys sorted)."""
    return json.dumps(obj, sort_keys=True)


def now() -> datetime:
    """Now in UTC, naive (TIMESTAMP columns hold UTC without a zone)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_time(value: Any) -> datetime:
    """An ISO 8601 string (or datetime) as a naive UTC datetime; zone-less input is taken as UTC."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise StoreError(f"recorded_at {value!r} is not an ISO 8601 time: "
                             "write it like 2024-05-01T12:00:00+00:00") from None
    else:
        raise StoreError(f"recorded_at must be an ISO 8601 string, got {type(value).__name__}: "
                         "write it like 2024-05-01T12:00:00+00:00")
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt


def checked(model: type[BaseModel], data: Any, what: str) -> BaseModel:
    """`data` as a `model` record, or StoreError naming the first thing wrong (nothing written)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"])) or "the record"
        raise StoreError(f"{what}: {where}: {err['msg']}: fix the record (nothing was written)") from None


def format_time(dt: datetime | None) -> str | None:
    return None if dt is None else dt.replace(tzinfo=timezone.utc).isoformat()


class Repository:
    """One group of tables of a Store. `PUBLIC` names the methods the Store offers as its own."""

    PUBLIC: tuple[str, ...] = ()

    def __init__(self, db) -> None:
        self._db = db  # the Store: its _write(fn) runs fn(con) in one transaction, _query reads

    def _write(self, fn):
        return self._db._write(fn)

    def _query(self, sql: str, params: list | None = None) -> list[tuple]:
        return self._db._query(sql, params)

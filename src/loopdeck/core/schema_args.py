"""A server tool's arguments as loopdeck's tools have them: a pydantic model (what the guard,
the idempotency key, the receipt, the scripts' check and the dispatcher validate with), made
from the tool's JSON Schema and checked by a maintained validator (`jsonschema`).

The model keeps the arguments as given (extra fields allowed: the schema decides what is
allowed), so its dump is the arguments themselves, in loopdeck's canonical form once
`canonical_args` has normalized them; its `model_json_schema()` is the server's schema, as
the model is shown it.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, model_validator

from loopdeck.core.text import capped

EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


class SchemaArgs(BaseModel):
    """The base of every server tool's arguments model (`args_model_for`)."""

    model_config = ConfigDict(extra="allow", frozen=True)


def args_model_for(tool: str, schema: dict[str, Any] | None) -> type[SchemaArgs]:
    """The arguments model of `tool`; a schema that is not valid JSON Schema is named."""
    schema = dict(schema or EMPTY_OBJECT)
    schema.setdefault("type", "object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        said = f"tool {tool}: its input schema is not valid JSON Schema: {exc.message}"
        raise ValueError(said) from None
    validator = Draft202012Validator(schema)

    def check(cls: type[SchemaArgs], data: Any) -> Any:
        errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            where = ".".join(str(p) for p in first.absolute_path) or "arguments"
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise ValueError(capped(f"{where}: {first.message}{more}", 500))
        return data

    def json_schema(cls: type[SchemaArgs], *args: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(schema)

    namespace: dict[str, Any] = {
        "__module__": __name__,
        "_check": model_validator(mode="before")(classmethod(check)),  # type: ignore[arg-type]
        "model_json_schema": classmethod(json_schema),
    }
    made: type[SchemaArgs] = type(f"{tool}_args", (SchemaArgs,), namespace)
    return made

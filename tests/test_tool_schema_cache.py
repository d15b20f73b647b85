"""A tool's schema as the model is told of it (`ToolSpec.json_schema`): the argument model's
JSON schema is made once per model and process (issue 43), and each caller gets its own copy."""

from __future__ import annotations

from pydantic import BaseModel, Field

from loopdeck.core.tools import ToolSpec


class ScaleArgs(BaseModel):
    service: str = Field(description="the service to scale")
    replicas: int = Field(ge=0, le=50)
    dry_run: bool = False


def _spec(name: str) -> ToolSpec:
    return ToolSpec(name=name, description=f"{name} it", args_model=ScaleArgs, fn=lambda a: None)


def test_the_schema_is_pydantics_and_each_caller_gets_its_own() -> None:
    first = _spec("scale").json_schema()
    assert first == {
        "type": "function",
        "function": {
            "name": "scale",
            "description": "scale it",
            "parameters": ScaleArgs.model_json_schema(),
        },
    }
    first["function"]["parameters"]["properties"].clear()  # a caller's change stays its own
    second = _spec("resize").json_schema()
    assert second["function"]["name"] == "resize"
    assert second["function"]["parameters"] == ScaleArgs.model_json_schema()

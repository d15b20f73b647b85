"""What an MCP server answers, as loopdeck's tools return it: data, never instructions.

A `CallToolResult` becomes `{"text": …}` (its text parts joined), with `"structured"` when the
server gave structured content and one short placeholder per image, audio or resource part
carrying its digest (`[image image/png, 1,024 bytes, sha256 …]`): the dispatcher then caps and
marks it as any tool result. Read as a snapshot entry (`state=True`), an embedded resource's
text is kept whole and every other part is its digest: the state moves whenever what a part
holds does, never keyed on a placeholder that stays the same. `isError` is the tool's failure
(`ToolError`, code `TOOL_ERROR`), the server's words its message. A resource read becomes its
text, or for a blob its type, size and digest.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from loopdeck.core.tools import ErrorCode, ToolError


def call_result(result: Any, state: bool = False) -> Any:
    texts: list[str] = []
    parts: list[str] = []
    for part in result.content or []:
        kind = getattr(part, "type", "")
        if kind == "text":
            texts.append(part.text)
        else:
            parts.append(_placeholder(part, state))
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(ErrorCode.TOOL_ERROR, text or "the server said the call failed")
    data: dict[str, Any] = {"text": text}
    if result.structured_content is not None:
        data["structured"] = result.structured_content
    if parts:
        data["parts"] = parts
    return data


def _placeholder(part: Any, state: bool) -> str:
    kind = getattr(part, "type", "content")
    if kind in ("image", "audio"):
        data = part.data or ""
        return f"[{kind} {part.mime_type}, {_size(data):,} bytes, sha256 {_digest(data)}]"
    if kind == "resource":
        inner = part.resource
        mime = getattr(inner, "mime_type", None) or ""
        text = getattr(inner, "text", None)
        if text is not None:
            if state:  # what the state holds, whole (shown capped, hashed whole)
                return f"[resource {inner.uri} {mime}]\n{text}".replace(" ]", "]")
            held = f"{len(text):,} characters, sha256 {_digest(text)}"
        else:
            blob = getattr(inner, "blob", "") or ""
            held = f"{_size(blob):,} bytes, sha256 {_digest(blob)}"
        return f"[resource {inner.uri} {mime}, {held}]".replace(" ,", ",")
    if kind == "resource_link":
        return f"[resource link {part.uri}]"
    return f"[{kind}]"


def _digest(data: str) -> str:
    """The first 16 hex digits of the sha256 of `data` as the server sent it."""
    return hashlib.sha256(data.encode("utf-8", "replace")).hexdigest()[:16]


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def resource_value(result: Any) -> Any:
    values: list[Any] = []
    for content in result.contents:
        text = getattr(content, "text", None)
        if text is not None:
            values.append(text)
            continue
        blob = getattr(content, "blob", "") or ""
        digest = hashlib.sha256(blob.encode("ascii", "replace")).hexdigest()[:16]
        values.append(f"[blob {content.mime_type or ''}, {_size(blob):,} bytes, sha256 {digest}]")
    return values[0] if len(values) == 1 else values

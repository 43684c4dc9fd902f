"""Generate ``models.py`` (TypedDicts and Literal enums) from Chime's OpenAPI schema.

    curl -s "$CHIME_URL/api/v1/schema?format=json" | python -m chime_client._codegen > models.py

The suite regenerates it from the schema the server serves and compares with the committed file
(clients/python/tests/test_models.py), so the SDK's types cannot drift from the API.
"""

from __future__ import annotations

import json
import keyword
import sys

HEADER = '''"""Chime API types, generated from the OpenAPI schema by ``python -m chime_client._codegen``.

Do not edit: regenerate (clients/python/tests/test_models.py fails when this file and the
server's schema disagree). Responses are plain dicts shaped like these TypedDicts.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

'''


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type(schema: dict, enums: set[str]) -> str:
    nullable = schema.get("nullable", False)
    if "$ref" in schema:
        text = _ref_name(schema["$ref"])
    elif "allOf" in schema and len(schema["allOf"]) == 1:
        text = _type(schema["allOf"][0], enums)
    elif "oneOf" in schema or "anyOf" in schema:
        options = [_type(option, enums) for option in schema.get("oneOf") or schema["anyOf"]]
        text = " | ".join(dict.fromkeys(options))
    elif "enum" in schema:
        text = _literal(schema["enum"])
    else:
        kind = schema.get("type")
        if kind == "string":
            text = "str"
        elif kind == "integer":
            text = "int"
        elif kind == "number":
            text = "float"
        elif kind == "boolean":
            text = "bool"
        elif kind == "array":
            text = f"list[{_type(schema.get('items', {}), enums)}]"
        elif kind == "object" and "additionalProperties" in schema and not schema.get("properties"):
            extra = schema["additionalProperties"]
            text = f"dict[str, {_type(extra, enums) if isinstance(extra, dict) else 'Any'}]"
        else:
            text = "Any"
    if nullable and text != "Any" and "None" not in text.split(" | "):
        text += " | None"
    return text


def _literal(values: list) -> str:
    if values == [None]:
        return "None"
    return "Literal[" + ", ".join(json.dumps(v) for v in values) + "]"


def generate(schema: dict) -> str:
    """The text of models.py for this schema (deterministic: sorted by component name)."""
    components = schema["components"]["schemas"]
    enums = {name for name, c in components.items() if "enum" in c and "properties" not in c}
    lines = [HEADER]
    for name in sorted(enums):
        lines.append(f"{name} = {_literal(components[name]['enum'])}\n")
    for name in sorted(set(components) - enums):
        component = components[name]
        required = set(component.get("required", []))
        doc = (component.get("description") or "").strip().splitlines()
        lines.append(f"\n\nclass {name}(TypedDict):\n")
        if doc:
            lines.append(f'    """{doc[0]}"""\n\n')
        properties = component.get("properties", {})
        if not properties:
            lines.append("    pass\n")
        for field, prop in properties.items():
            if not field.isidentifier() or keyword.iskeyword(field):
                raise ValueError(f"{name}.{field} is not a Python identifier")
            text = _type(prop, enums)
            lines.append(f"    {field}: {text if field in required else f'NotRequired[{text}]'}\n")
    return "".join(lines)


if __name__ == "__main__":
    sys.stdout.write(generate(json.load(sys.stdin)))

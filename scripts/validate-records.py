#!/usr/bin/env python3
"""Validates record values against the relay's JSON Schemas (draft 2020-12) with python-jsonschema.

    validate-records.py REQUEST.json

REQUEST: {"schemas": {NAME: SCHEMA, ...}, "records": [{"schema": NAME, "label": TEXT, "value": BASE64}, ...]}
(values in base64, so that bytes that are not UTF-8 arrive as they are). Prints one JSON array, a verdict per
record in order: {"label": TEXT, "valid": BOOL, "error": TEXT or null}. Exit 0 when every schema is a valid
2020-12 schema (whatever the verdicts), 2 when one is not.

A value is read as a strict JSON reader reads it: UTF-8 only, no NaN or Infinity, no lone surrogate escapes, numbers
exact; one that is not JSON is invalid. `pattern` follows ECMA-262, as JSON Schema says: `$` matches at the very end only
(Python's `$` would also match before a final line feed).
"""
import base64
import decimal
import json
import re
import sys

import jsonschema
from jsonschema import Draft202012Validator, validators


def ecma_pattern(validator, pattern, instance, schema):
    if not validator.is_type(instance, "string"):
        return
    # ECMA-262's `$` (no multiline flag) is Python's `\Z`.
    python_pattern = re.sub(r"(?<!\\)\$", r"\\Z", pattern)
    if re.search(python_pattern, instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def is_integer(checker, instance):
    # Numbers are read exactly (decimal.Decimal, not a float's 53 bits): a whole value is an integer, however written.
    if isinstance(instance, bool):
        return False
    return isinstance(instance, int) or (isinstance(instance, decimal.Decimal) and instance.is_finite()
                                         and instance == instance.to_integral_value())


def is_number(checker, instance):
    return not isinstance(instance, bool) and isinstance(instance, (int, decimal.Decimal))


StrictValidator = validators.extend(
    Draft202012Validator,
    {"pattern": ecma_pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": is_integer, "number": is_number}),
)


def refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def parse(value_bytes):
    text = value_bytes.decode("utf-8")  # strict: raises on bytes that are not UTF-8
    value = json.loads(text, parse_constant=refuse_constant, parse_float=decimal.Decimal)
    json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")  # raises on a lone surrogate
    return value


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    checkers = {}
    for name, schema in request["schemas"].items():
        try:
            Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as error:
            print(f"schema {name} is not a valid 2020-12 schema: {error.message}", file=sys.stderr)
            return 2
        checkers[name] = StrictValidator(schema)
    verdicts = []
    for record in request["records"]:
        raw = base64.b64decode(record["value"])
        try:
            value = parse(raw)
        except (ValueError, UnicodeError) as error:
            verdicts.append({"label": record["label"], "valid": False, "error": f"not JSON: {error}"})
            continue
        errors = sorted(checkers[record["schema"]].iter_errors(value), key=lambda e: list(e.absolute_path))
        message = None
        if errors:
            first = errors[0]
            where = "/".join(str(part) for part in first.absolute_path) or "(root)"
            message = f"{where}: {first.message}"
        verdicts.append({"label": record["label"], "valid": not errors, "error": message})
    json.dump(verdicts, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

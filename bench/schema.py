"""JSON Schema (draft 2020-12) of the results document written by ``python -m bench --json``:
``python -c "import bench.schema, json; print(json.dumps(bench.schema.SCHEMA))"``."""
from .results import FORMAT

_number = {"type": "number"}
_count = {"type": "integer", "minimum": 0}
_text = {"type": "string"}


def _maybe(schema):
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties, required=None):
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required}


_seconds = {"type": "number", "minimum": 0}
STATS = _object({"n": {"type": "integer", "minimum": 1}, "min": _seconds, "q1": _seconds,
                 "median": _seconds, "q3": _seconds, "max": _seconds, "iqr": _seconds})

ROW = _object({
    "workload": _text, "case": _text, "impl": _text,
    "samples": _maybe({"type": "array", "items": _seconds, "minItems": 1}),
    "number": _maybe({"type": "integer", "minimum": 1}),
    "warmup": _maybe(_count),
    "stats": _maybe(STATS),
    "vs_ref": _maybe(_number), "grad_obj": _maybe(_number),
    "first_call_s": _maybe(_seconds), "cached_bytes": _maybe(_count),
    "alloc_bytes": _maybe(_count), "err": _maybe(_number), "tol": _maybe(_number),
    "ok": _maybe({"type": "boolean"}), "check": _text, "note": _text,
})

ENVIRONMENT = _object(required=["date", "load_average", "platform", "cpu", "threads", "versions"],
                      properties={
    "date": {"type": "string", "format": "date-time"},
    "load_average": _object({"start": _maybe(_number), "end": _maybe(_number)}),
    "platform": _object({"system": _text, "release": _text, "machine": _text}),
    "math": _text,
    "cpu": _object({"model": _text, "llvm_name": _text, "flags": {"type": "array", "items": _text},
                    "cores": _maybe(_count), "usable_cores": _maybe(_count),
                    "memory_bytes": _maybe(_count)}),
    "threads": _object({
        "variables": {"type": "object", "additionalProperties": _maybe(_text)},
        "pools": {"type": "array", "items": _object({
            "api": _text, "version": _maybe(_text), "num_threads": _count, "library": _text})},
        "numba": _object({"num_threads": _count, "threading_layer": _text}),
        "torch": _maybe(_count)}),
    "versions": _object({
        "python": _text, "implementation": _text,
        "numpy": _text, "scipy": _maybe(_text), "numba": _text, "llvmlite": _text,
        "threadpoolctl": _maybe(_text),
        "adcore": _object({"version": _maybe(_text), "commit": _maybe(_text),
                           "describe": _maybe(_text)}),
        "peers": {"type": "object", "additionalProperties": _maybe(_text)}}),
})

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "adcore benchmark results",
    **_object({
        "format": {"const": FORMAT},
        "command": _text,
        "settings": _object({
            "workloads": {"type": "array", "items": _text}, "quick": {"type": "boolean"},
            "size": {"type": "number", "exclusiveMinimum": 0},
            "repeat": {"type": "integer", "minimum": 1}, "min_time": _seconds,
            "warmup": _count}),
        "environment": ENVIRONMENT,
        "seconds": _seconds,
        "workloads": {"type": "array", "items": _object({
            "name": _text, "seconds": _seconds, "rss_start_bytes": _maybe(_count),
            "rss_peak_bytes": _maybe(_count)})},
        "rows": {"type": "array", "items": ROW},
    }),
}

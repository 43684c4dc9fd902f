"""One serializer instance per class for the whole process, for the hot endpoints.

Building a DRF serializer is most of what a small request costs: `Serializer.fields` deep-copies
every declared field (nested serializers and their fields included, each re-created from its
arguments) and a ModelSerializer also introspects its model, on every instance. For
`POST /api/v1/jobs` that was ~25 % of the web process's CPU per created job (`py-spy record --gil`
on the Procfile's web under `python -m bench.create`), for fields that are the same every time.

A serializer used without `data=`, `instance=` or `context` keeps no per-call state: its bound
fields are read, never written, by `run_validation(data)` (which returns the validated data, as
DRF's ListField does with its `child` for every item) and `to_representation(obj)`. So one
instance, with its fields built once, serves every request and every thread. Only classes whose
validation and output read nothing from `context` belong here (JobInputSerializer reads
`context["job"]` for an update only: updates build their own). Used by apps/api/views/jobs.py
and runs.py: job create, batch and list; a run's trigger, cancel, replay, the run lists and a
backfill's runs.
"""

import threading

from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.settings import api_settings

_instances: dict[type, serializers.Serializer] = {}
_lock = threading.Lock()


def shared(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """The process's instance of `serializer_class`, its fields built (no data, no context)."""
    instance = _instances.get(serializer_class)
    if instance is None:
        with _lock:
            instance = _instances.get(serializer_class)
            if instance is None:
                instance = serializer_class()
                _ = instance.fields  # bound now, before any request reads them
                _instances[serializer_class] = instance
    return instance


def shown(serializer_class: type[serializers.Serializer], items) -> list:
    """Each of `items` as the shared instance of `serializer_class` shows it (what
    `serializer_class(items, many=True).data` gives, without building a serializer)."""
    serializer = shared(serializer_class)
    return [serializer.to_representation(item) for item in items]


def validated(serializer_class: type[serializers.Serializer], data) -> dict:
    """`serializer_class(data=data).is_valid(raise_exception=True)`'s validated data, through the
    shared instance, with the same error for every input. `is_valid` words one case its own way
    (`Serializer.errors`): a body of JSON `null` is "No data provided", not the field's "This
    field may not be null."; that is kept here."""
    try:
        return shared(serializer_class).run_validation(data)
    except ValidationError as error:
        detail = error.detail
        if isinstance(detail, list) and len(detail) == 1 and getattr(detail[0], "code", None) == "null":
            raise ValidationError(
                {api_settings.NON_FIELD_ERRORS_KEY: [ErrorDetail("No data provided", code="null")]}
            ) from error
        raise

"""kube-apiserver's validation of ``events.k8s.io/v1`` Events, for what a recorder writes.

On create (in kube-apiserver's order, every failure collected into one 422): ``series.count``
at least 2, ``eventTime`` set, ``type`` ``Normal`` or ``Warning``, ``reportingController`` set
and a qualified name, ``reportingInstance``, ``action`` and ``reason`` set. An ``eventTime``
(or ``series.lastObservedTime``) that is not a MicroTime with six fraction digits is refused
before that, as a body the server cannot decode (400). On a patch: the series rule again, and
the Event's content is immutable (the field paths are the core Event's: ``note`` is
``message``, ``regarding`` ``involvedObject``; a string field's value is quoted in the message
as kube-apiserver quotes it, any other shown as ``{...}``).

The 422 messages read ``Event "name" is invalid: <field>: <error>`` (several in brackets).

Pure module: no threads, no locks.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kdispatch.actors.model.errors import InvalidRequestError
from kdispatch.actors.model.objects import is_name_part

Json = dict[str, Any]

API_VERSION = "events.k8s.io/v1"
MICRO_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
_NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
_ZONE = re.compile(r"Z|[+-]\d{2}:\d{2}")
_IMMUTABLE = (
    ("regarding", "involvedObject"),
    ("reason", "reason"),
    ("note", "message"),
    ("type", "type"),
    ("eventTime", "eventTime"),
    ("action", "action"),
    ("related", "related"),
    ("reportingController", "reportingController"),
    ("reportingInstance", "reportingInstance"),
)
"""(field of events.k8s.io/v1, its path in kube-apiserver's messages) that never change."""


def applies(obj: Json) -> bool:
    """Whether ``obj`` is an ``events.k8s.io/v1`` Event (the kind may be re-registered as the
    core one, which this module does not validate)."""
    return obj.get("kind") == "Event" and obj.get("apiVersion") == API_VERSION


def _micro_time_error(value: object) -> str | None:
    """Why ``value`` is not MicroTime text, worded as Go's time parser, or None."""
    if not isinstance(value, str):
        return None
    match = _DATE_TIME.match(value)
    if match is None:
        return f'cannot parse "{value}" as "2006"'
    rest = value[match.end() :]
    if not re.match(r"\.\d{6}", rest):
        return f'cannot parse "{rest}" as ".000000"'
    if not _ZONE.fullmatch(rest[7:]):
        return f'cannot parse "{rest[7:]}" as "Z07:00"'
    return None


def check_decodable(obj: Json) -> None:
    """400, as kube-apiserver's decoder answers, when a MicroTime field is malformed."""
    series = obj.get("series")
    times = [obj.get("eventTime")]
    if isinstance(series, dict):
        times.append(series.get("lastObservedTime"))
    for value in times:
        error = _micro_time_error(value)
        if error is not None:
            raise InvalidRequestError(
                'Event in version "v1" cannot be handled as a Event: parsing time '
                f'"{value}" as "{MICRO_LAYOUT}": {error}',
                status=400,
            )


def _series_errors(obj: Json) -> list[str]:
    series = obj.get("series")
    if not isinstance(series, dict):
        return []
    errors = []
    count = series.get("count")
    if not isinstance(count, int) or count < 2:
        errors.append('series.count: Invalid value: "": should be at least 2')
    if not series.get("lastObservedTime"):
        errors.append("series.lastObservedTime: Required value")
    return errors


def _raise(obj: Json, errors: list[str]) -> None:
    if not errors:
        return
    name = (obj.get("metadata") or {}).get("name", "")
    joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    raise InvalidRequestError(f'Event "{name}" is invalid: {joined}')


def validate_create(obj: Json) -> None:
    """400 or 422 unless ``obj`` is an Event kube-apiserver accepts (see the module)."""
    check_decodable(obj)
    errors = _series_errors(obj)
    if not obj.get("eventTime"):
        errors.append("eventTime: Required value")
    kind = obj.get("type")
    if kind not in ("Normal", "Warning"):
        errors.append(f'type: Invalid value: "": has invalid value: {kind or ""}')
    controller = obj.get("reportingController") or ""
    if not controller:
        errors += [
            "reportingController: Required value",
            'reportingController: Invalid value: "": name part must be non-empty',
        ]
    name_part = str(controller).rpartition("/")[2]
    if not is_name_part(name_part):
        errors.append(
            f"reportingController: Invalid value: {json.dumps(controller)}: " + _NAME_PART_MESSAGE
        )
    for field in ("reportingInstance", "action", "reason"):
        if not obj.get(field):
            errors.append(f"{field}: Required value")
    _raise(obj, errors)


def validate_update(old: Json, new: Json) -> None:
    """400 or 422 unless kube-apiserver accepts ``new`` in place of ``old``."""
    check_decodable(new)
    errors = _series_errors(new)
    for field, path in _IMMUTABLE:
        if new.get(field) != old.get(field):
            value = new.get(field)
            shown = json.dumps(value) if isinstance(value, str) else "{...}"
            errors.append(f"{path}: Invalid value: {shown}: field is immutable")
    _raise(new, errors)

"""The job form: every field of the v1 job contract (docs/api.md), validated like the API does.

tests/dashboard/test_job_form.py checks that this form and the API's serializer accept and refuse
the same inputs, so the two cannot drift apart silently.
"""

import json
from datetime import datetime

from django import forms
from django.conf import settings

from apps.jobs.models import ConcurrencyPolicy, DstGap, DstOverlap, JobDefinition, MisfirePolicy, Priority, ScheduleType
from apps.jobs.schedules import CronSchedule, DstPolicy, ScheduleError, parse_timezone
from apps.jobs.secrets import REDACTED, SecretHeaderError, marked_names, restore_redacted, visible_headers
from apps.jobs.targets import HTTP_METHODS, TargetError, check_target_body, check_target_headers, check_target_url

RUN_AT_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S")


def _number(label: str, low: int, high: int, initial: int, help_text: str = "") -> forms.IntegerField:
    return forms.IntegerField(label=label, min_value=low, max_value=high, initial=initial, help_text=help_text)


class JobForm(forms.Form):
    name = forms.CharField(label="Name", max_length=200)
    schedule_type = forms.ChoiceField(
        label="Schedule type", choices=ScheduleType.choices, initial=ScheduleType.CRON, widget=forms.RadioSelect
    )
    cron_expression = forms.CharField(
        label="Cron expression",
        max_length=120,
        required=False,
        help_text="5 fields: minute hour day-of-month month day-of-week, e.g. '0 2 * * *', or @daily.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    timezone = forms.CharField(
        label="Time zone",
        max_length=64,
        initial="UTC",
        help_text="IANA name, e.g. Europe/Berlin. Cron is evaluated on this zone's wall clock.",
        widget=forms.TextInput(attrs={"list": "timezone-names", "autocomplete": "off"}),
    )
    run_at = forms.CharField(
        label="Run at (once)",
        required=False,
        help_text="Wall time in the time zone above. Empty: as soon as possible.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    dst_gap = forms.ChoiceField(
        label="DST gap (the wall time does not exist)", choices=DstGap.choices, initial=DstGap.SHIFT
    )
    dst_overlap = forms.ChoiceField(
        label="DST overlap (the wall time happens twice)", choices=DstOverlap.choices, initial=DstOverlap.FIRST
    )
    target_url = forms.CharField(
        label="Webhook URL", max_length=2048, widget=forms.URLInput(attrs={"placeholder": "https://example.com/hook"})
    )
    target_method = forms.ChoiceField(label="HTTP method", choices=[(m, m) for m in HTTP_METHODS], initial="POST")
    target_headers = forms.CharField(
        label="Headers",
        required=False,
        help_text="One 'Name: value' per line.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )
    secret_header_names = forms.CharField(
        label="Secret headers",
        required=False,
        help_text="Names of headers whose values are credentials, comma separated. Authorization, Cookie and "
        f"names with key, token, secret, password or auth are secret anyway. Secret values are shown as {REDACTED}; "
        f"leave {REDACTED} to keep the stored value.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    target_body = forms.CharField(
        label="Body (JSON)",
        required=False,
        help_text="Empty: Chime sends an event describing the run.",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
    )
    priority = forms.ChoiceField(label="Priority", choices=Priority.choices, initial=Priority.DEFAULT)
    timeout_seconds = _number("Timeout (seconds)", 1, settings.CHIME_MAX_TIMEOUT_SECONDS, 30)
    retry_max_attempts = _number("Max attempts", 1, 50, 5)
    retry_initial_backoff_seconds = _number("First retry after (seconds)", 1, 86400, 10)
    retry_max_backoff_seconds = _number("Longest retry wait (seconds)", 1, 7 * 86400, 3600)
    misfire_policy = forms.ChoiceField(
        label="Misfire policy",
        choices=MisfirePolicy.choices,
        initial=MisfirePolicy.CATCH_UP,
        help_text="What happens to occurrences missed while Chime or the job was down or paused.",
    )
    catch_up_limit = _number("Catch-up limit", 1, 1000, 100)
    jitter_seconds = _number("Jitter (seconds)", 0, 3600, 0, "A fixed per-job delay spreads top-of-the-hour load.")
    concurrency_policy = forms.ChoiceField(
        label="Concurrency policy", choices=ConcurrencyPolicy.choices, initial=ConcurrencyPolicy.ALLOW
    )
    failure_threshold = _number("Pause after failures in a row", 0, 1000, 10, "0: never pause.")
    enabled = forms.BooleanField(label="Enabled", required=False, initial=True)

    def __init__(self, *args, job: JobDefinition | None = None, **kwargs):
        """`job`: the job being edited, whose stored header values a `<redacted>` value keeps."""
        super().__init__(*args, **kwargs)
        self.job = job

    # -- field checks, in the API's words where it has them

    def clean_timezone(self):
        name = self.cleaned_data["timezone"].strip() or "UTC"
        try:
            parse_timezone(name)
        except ScheduleError as error:
            raise forms.ValidationError(error.message) from error
        return name

    def clean_run_at(self):
        text = self.cleaned_data["run_at"].strip()
        if not text:
            return None
        for fmt in RUN_AT_FORMATS:
            try:
                return datetime.strptime(text, fmt)  # naive on purpose: a wall time in the job's zone
            except ValueError:
                continue
        raise forms.ValidationError("Enter a date and time, e.g. 2026-12-01 10:00.")

    def clean_target_url(self):
        url = self.cleaned_data["target_url"].strip()
        try:
            check_target_url(url)
        except TargetError as error:
            raise forms.ValidationError(str(error)) from error
        return url

    def clean_target_headers(self):
        headers: dict[str, str] = {}
        for number, line in enumerate(self.cleaned_data["target_headers"].splitlines(), start=1):
            if not line.strip():
                continue
            name, colon, value = line.partition(":")
            name = name.strip()
            if not colon:
                raise forms.ValidationError(f"Line {number}: write 'Name: value'.")
            headers[name] = value.strip()
        try:
            check_target_headers(headers)
        except TargetError as error:
            raise forms.ValidationError(str(error)) from error
        return headers

    def clean_target_body(self):
        text = self.cleaned_data["target_body"].strip()
        if not text:
            return None
        try:
            body = json.loads(text)
        except ValueError as error:
            raise forms.ValidationError(f"Not valid JSON: {error}.") from error
        try:
            check_target_body(body)
        except TargetError as error:
            raise forms.ValidationError(str(error)) from error
        return body

    def clean_secret_header_names(self):
        text = self.cleaned_data["secret_header_names"]
        return list(dict.fromkeys(name.strip() for name in text.replace("\n", ",").split(",") if name.strip()))

    def _clean_secret_headers(self, cleaned):
        headers, names = cleaned.get("target_headers"), cleaned.get("secret_header_names")
        if headers is None or names is None:
            return
        try:
            cleaned["secret_header_names"] = marked_names(names, headers)
        except SecretHeaderError as error:
            self.add_error("secret_header_names", str(error))
            return
        if "target_url" in cleaned:
            try:
                cleaned["target_headers"] = restore_redacted(headers, job=self.job, url=cleaned["target_url"])
            except SecretHeaderError as error:
                self.add_error("target_headers", str(error))

    def clean(self):
        cleaned = super().clean()
        self._clean_secret_headers(cleaned)
        if cleaned.get("schedule_type") == ScheduleType.CRON:
            self._clean_cron(cleaned)
        else:
            cleaned["cron_expression"] = ""  # the API refuses an expression on a `once` schedule
            zone_name = cleaned.get("timezone")
            if cleaned.get("run_at") is not None and zone_name:
                cleaned["run_at"] = cleaned["run_at"].replace(tzinfo=parse_timezone(zone_name))
        initial, longest = cleaned.get("retry_initial_backoff_seconds"), cleaned.get("retry_max_backoff_seconds")
        if initial is not None and longest is not None and longest < initial:
            self.add_error("retry_max_backoff_seconds", "Must be at least the first retry's wait.")
        return cleaned

    def _clean_cron(self, cleaned):
        cleaned["run_at"] = None
        expression = (cleaned.get("cron_expression") or "").strip()
        if not expression:
            self.add_error("cron_expression", "A cron schedule needs an expression.")
            return
        if "timezone" not in cleaned or "dst_gap" not in cleaned or "dst_overlap" not in cleaned:
            return
        try:
            schedule = CronSchedule.parse(
                expression, cleaned["timezone"], DstPolicy(cleaned["dst_gap"], cleaned["dst_overlap"])
            )
        except ScheduleError as error:
            self.add_error("timezone" if error.field == "timezone" else "cron_expression", error.message)
            return
        cleaned["cron_expression"] = schedule.expression

    def job_fields(self) -> dict:
        """Keyword arguments for apps.jobs.services.job_create / job_update."""
        return {name: self.cleaned_data[name] for name in self.fields}

    @classmethod
    def initial_for(cls, job: JobDefinition) -> dict:
        initial = {name: getattr(job, name) for name in cls.base_fields if hasattr(job, name)}
        initial["target_headers"] = "\n".join(f"{name}: {value}" for name, value in visible_headers(job).items())
        initial["secret_header_names"] = ", ".join(job.secret_header_names)
        initial["target_body"] = "" if job.target_body is None else json.dumps(job.target_body, indent=2)
        initial["enabled"] = job.enabled
        initial["run_at"] = ""
        if job.run_at is not None:
            initial["run_at"] = job.run_at.astimezone(parse_timezone(job.timezone)).strftime("%Y-%m-%dT%H:%M:%S")
        return initial

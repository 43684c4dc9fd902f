from uuid import UUID

from django import forms

from apps.jobs.models import ErrorKind, RunStatus

DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]
# Up to this many jobs the filter is a drop-down of their names; past it, a box for a job's name or
# id. The history bench (docs/benchmarks.md#run-history) had a tenant of 13,360 jobs: listing them
# all made every runs page ~1 MB of HTML and ~1 s of rendering, whatever the runs.
JOB_MENU_LIMIT = 200


class JobLookupField(forms.CharField):
    """A job of the tenant by id or by exact name; cleans to the job's id (as the drop-down does)."""

    def __init__(self, jobs, **kwargs):
        self.jobs = jobs
        kwargs.setdefault("help_text", "A job's name or id.")
        super().__init__(**kwargs)

    def clean(self, value) -> str:
        value = super().clean(value).strip()
        if not value:
            return ""
        try:
            job_id = UUID(value)
        except ValueError:
            return self._by_name(value)
        if not self.jobs.filter(id=job_id).exists():
            raise forms.ValidationError("No job with this id.")
        return str(job_id)

    def _by_name(self, name: str) -> str:
        matches = list(self.jobs.filter(name=name).values_list("id", flat=True)[:2])
        if len(matches) == 1:
            return str(matches[0])
        if matches:
            raise forms.ValidationError(f"Several jobs are named “{name[:100]}”: use the id on the job's page.")
        raise forms.ValidationError(f"No job named “{name[:100]}”.")


def job_filter_field(jobs) -> forms.Field:
    """The `job` filter for the tenant's `jobs` (a queryset): a drop-down while they are few."""
    first = list(jobs.only("id", "name")[: JOB_MENU_LIMIT + 1])
    if len(first) > JOB_MENU_LIMIT:
        return JobLookupField(jobs, label="Job", required=False, max_length=200)
    choices = sorted(((str(job.id), job.name) for job in first), key=lambda choice: choice[1].lower())
    return forms.ChoiceField(label="Job", required=False, choices=[("", "any"), *choices])


class RunFilterForm(forms.Form):
    """Runs list filters. Times are read in the viewer's time zone (the one the page shows)."""

    status = forms.ChoiceField(label="Status", required=False, choices=[("", "any"), *RunStatus.choices])
    job = forms.ChoiceField(label="Job", required=False)
    scheduled_after = forms.DateTimeField(
        label="Scheduled from",
        required=False,
        input_formats=DATETIME_FORMATS,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    scheduled_before = forms.DateTimeField(
        label="Scheduled before",
        required=False,
        input_formats=DATETIME_FORMATS,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )

    def __init__(self, *args, jobs, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["job"] = job_filter_field(jobs)

    def filters(self) -> dict:
        if not self.is_valid():
            return {}
        data = self.cleaned_data
        return {
            "status": data["status"],
            "job_id": data["job"] or None,
            "scheduled_after": data["scheduled_after"],
            "scheduled_before": data["scheduled_before"],
        }


class UUIDListField(forms.Field):
    widget = forms.MultipleHiddenInput  # checkboxes are drawn by the page's rows; this reads getlist()

    def to_python(self, value) -> list[UUID]:
        try:
            return [UUID(str(item)) for item in value or []]
        except ValueError as error:
            raise forms.ValidationError("Select runs from the list.") from error


class RunSelectionForm(forms.Form):
    """Runs picked on the dead-letters page; `confirmed` is set by the confirmation step."""

    runs = UUIDListField(label="Runs", error_messages={"required": "Select at least one run."})
    confirmed = forms.BooleanField(required=False)

    def run_ids(self) -> list[UUID]:
        return self.cleaned_data["runs"] if self.is_valid() else []


class DeadLetterFilterForm(forms.Form):
    """The dead-letters page's filter, also what "Replay all matching" replays (apps/operations):
    one job, the last attempt's error kind or HTTP status, a scheduled range (viewer's time zone)."""

    job = forms.ChoiceField(label="Job", required=False)
    error_kind = forms.ChoiceField(label="Error", required=False, choices=[("", "any"), *ErrorKind.choices])
    status_code = forms.IntegerField(label="HTTP status", required=False, min_value=100, max_value=599)
    scheduled_after = RunFilterForm.base_fields["scheduled_after"]
    scheduled_before = RunFilterForm.base_fields["scheduled_before"]

    def __init__(self, *args, jobs, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["job"] = job_filter_field(jobs)

    def clean(self):
        data = super().clean()
        after, before = data.get("scheduled_after"), data.get("scheduled_before")
        if after and before and before <= after:
            self.add_error("scheduled_before", "Must be after “Scheduled from”.")
        return data

    def filters(self) -> dict:
        """For listings.dead_letters (and selectors.dead_letters_matching); {} when invalid."""
        if not self.is_bound or not self.is_valid():
            return {}
        data = self.cleaned_data
        return {
            "job_id": data["job"] or None,
            "error_kind": data["error_kind"],
            "status_code": data["status_code"],
            "scheduled_after": data["scheduled_after"],
            "scheduled_before": data["scheduled_before"],
        }

    def operation_params(self) -> dict:
        """The replay operation's params, as the API stores them (only the filters given)."""
        data = self.filters()
        params = {
            "job": data.get("job_id"),
            "error_kind": data.get("error_kind") or None,
            "status_code": data.get("status_code"),
            "scheduled_after": data["scheduled_after"].isoformat() if data.get("scheduled_after") else None,
            "scheduled_before": data["scheduled_before"].isoformat() if data.get("scheduled_before") else None,
        }
        return {key: value for key, value in params.items() if value is not None}

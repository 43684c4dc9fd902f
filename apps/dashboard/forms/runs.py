from uuid import UUID

from django import forms

from apps.jobs.models import RunStatus

DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]


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

    def __init__(self, *args, jobs=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["job"].choices = [("", "any"), *((str(job.id), job.name) for job in jobs)]

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

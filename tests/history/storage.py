"""An archive storage for tests that lets a user act in the middle of a prune batch: on its first
save it replays a dead letter (the real replay service), as a concurrent API call would."""

from django.core.files.storage import FileSystemStorage


class ReplayDuringSave(FileSystemStorage):
    def __init__(self, *, run_id, **options):
        super().__init__(**options)
        self.run_id = run_id
        self.replayed = False

    def _save(self, name, content):
        if not self.replayed:
            from apps.jobs.models import JobRun
            from apps.jobs.services import run_replay

            self.replayed = True
            run_replay(run=JobRun.objects.get(pk=self.run_id))
        return super()._save(name, content)

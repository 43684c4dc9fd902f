"""The SDK lists a tenant's run archives and downloads one as bytes, from a live Chime."""

import gzip
import json
from datetime import timedelta

from django.utils import timezone

from apps.history import archive, services
from apps.history.models import RunArchive
from apps.jobs.models import JobRun, RunStatus
from tests.factories import JobFactory


def test_archives_list_and_download(chime, tenant):
    job = JobFactory(tenant=tenant)
    old = timezone.now() - timedelta(days=45)
    runs = [
        JobRun.objects.create(
            tenant=tenant,
            definition=job,
            partition=job.partition,
            scheduled_for=old + timedelta(seconds=i),
            available_at=old,
            status=RunStatus.SUCCEEDED,
        )
        for i in range(3)
    ]
    JobRun.objects.filter(pk__in=[r.pk for r in runs]).update(created_at=old, finished_at=old)
    result = services.prune_tenant(tenant=tenant, now=timezone.now())
    try:
        (listed,) = list(chime.archives.list())
        assert (listed["kind"], listed["run_count"]) == ("prune", 3)
        assert list(chime.archives.list(kind="export")) == []
        data = chime.archives.download(listed["id"])
        assert isinstance(data, bytes) and len(data) == listed["bytes"]
        lines = [json.loads(line) for line in gzip.decompress(data).splitlines()]
        assert {line["id"] for line in lines} == {str(r.id) for r in runs}
    finally:
        for record in result.archive_ids:
            archive.delete_file(RunArchive.objects.get(pk=record).path)

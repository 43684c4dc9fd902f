import pytest

from apps.dashboard.describe import describe_cron

CASES = [
    ("0 2 * * *", "at 02:00 every day"),
    ("@daily", "at 00:00 every day"),
    ("* * * * *", "every minute"),
    ("*/15 * * * *", "every 15 minutes"),
    ("5 * * * *", "every hour at :05"),
    ("15 */2 * * *", "every 2 hours at :15"),
    ("0 9 * * MON-FRI", "at 09:00 on weekdays"),
    ("0 9 * * 1-5", "at 09:00 on weekdays"),
    ("0 10 * * 0,6", "at 10:00 on weekends"),
    ("30 7 * * SUN", "at 07:30 every Sunday"),
    ("0 9,17 * * 1,3,5", "at 09:00 and 17:00 on Monday, Wednesday and Friday"),
    ("0 12 * * 0,3", "at 12:00 on Wednesday and Sunday"),
    ("0 0 1 * *", "at 00:00 on the 1st of every month"),
    ("0 6 1,15 * *", "at 06:00 on the 1st and 15th of every month"),
    ("0 0 1 1 *", "at 00:00 on 1 January"),
    ("*/15 * * * 1-5", "every 15 minutes on weekdays"),
    # Shapes without a short phrase fall back to the expression itself.
    ("0 0 L * *", "cron 0 0 L * *"),
    ("*/5 9-17 * * 1-5", "cron */5 9-17 * * 1-5"),
    ("0 0 1 * MON", "cron 0 0 1 * MON"),
    ("0 0 * * 1#2", "cron 0 0 * * 1#2"),
]


@pytest.mark.parametrize(("expression", "words"), CASES)
def test_it_describes_common_schedules(expression, words):
    assert describe_cron(expression) == words


def test_it_names_the_zone_and_once_jobs(db, tenant):
    from datetime import UTC, datetime

    from apps.dashboard.describe import describe_schedule
    from apps.jobs.services import job_create

    cron = job_create(tenant=tenant, name="c", schedule_type="cron", cron_expression="0 2 * * *",
                      timezone="Europe/Berlin", target_url="http://127.0.0.1:9/")  # fmt: skip
    assert describe_schedule(cron) == "at 02:00 every day, Europe/Berlin"
    once = job_create(tenant=tenant, name="o", schedule_type="once", run_at=datetime(2030, 1, 1, 8, tzinfo=UTC),
                      timezone="Asia/Tokyo", target_url="http://127.0.0.1:9/")  # fmt: skip
    assert describe_schedule(once) == "once at 2030-01-01 17:00, Asia/Tokyo"

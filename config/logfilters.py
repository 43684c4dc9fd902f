"""Logging filters: a client error (4xx) is logged once, and never as an ERROR.

The web server's access log (uvicorn: `"POST /api/v1/jobs HTTP/1.1" 400`) has one line per request,
so Django's own WARNING for every 4xx (`django.request`: "Bad Request: /api/v1/jobs") only doubles it
(settings.LOGGING raises that logger to ERROR, which keeps 5xx). A SuspiciousOperation, e.g. a Host
header not in ALLOWED_HOSTS, is a 400 too, but Django logs it at ERROR with a traceback under
`django.security.<name>`: scanners sending random Host headers would page someone. Its reason is worth
one line (it is how a wrong ALLOWED_HOSTS or CSRF_TRUSTED_ORIGINS shows), so it is kept as a WARNING
without the traceback. The filter sits on the handler because a logger's filters do not see records
of its child loggers (django.security.DisallowedHost, django.security.csrf, ...).
"""

import logging


class ClientErrorsAsWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.name.startswith("django.security.") and isinstance(status, int) and status < 500:
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True

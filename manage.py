#!/usr/bin/env python
import os
import sys


def main() -> None:
    # A deploy (the Procfile) gets production settings without setting anything; `./chime run`
    # chooses config.settings.base and the tests config.settings.test. Same in asgi/wsgi/celery.py.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()

"""Not a package to install: lets pytest name the client tests clients.python.tests (not tests)."""

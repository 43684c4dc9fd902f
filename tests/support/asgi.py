"""An ASGI HTTP scope as uvicorn builds one, for tests that call the ASGI application directly."""


def http_scope(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    return {
        "type": "http", "http_version": "1.1", "method": method, "path": path, "raw_path": path.encode(),
        "query_string": b"", "headers": headers or [(b"host", b"localhost")], "scheme": "http",
        "server": ("localhost", 80), "client": ("127.0.0.1", 5000),
    }  # fmt: skip

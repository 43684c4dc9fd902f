"""SSRF guard primitives: table-driven."""

import ipaddress

import pytest

from apps.delivery.safety import (
    InvalidTarget,
    UnsafeTarget,
    address_refusal_reason,
    check_url,
    is_address_allowed,
)

# (address, allowed when private networks are refused, allowed when they are allowed)
ADDRESS_CASES = [
    # public
    ("93.184.216.34", True, True),
    ("8.8.8.8", True, True),
    ("1.1.1.1", True, True),
    ("2606:4700::1111", True, True),
    ("2001:4860:4860::8888", True, True),
    ("::ffff:93.184.216.34", True, True),  # mapped public
    ("64:ff9b::808:808", True, True),  # NAT64 of 8.8.8.8
    ("2002:5db8:d822::1", True, True),  # 6to4 of 93.184.216.34
    # loopback
    ("127.0.0.1", False, True),
    ("127.255.255.254", False, True),
    ("::1", False, True),
    # private
    ("10.0.0.1", False, True),
    ("172.16.5.4", False, True),
    ("172.31.255.255", False, True),
    ("192.168.1.1", False, True),
    # link-local / metadata
    ("169.254.169.254", False, True),
    ("169.254.1.1", False, True),
    ("fe80::1", False, True),
    ("fd00:ec2::254", False, True),
    # shared / CGNAT (incl. Alibaba metadata 100.100.100.200)
    ("100.64.0.1", False, True),
    ("100.100.100.200", False, True),
    ("100.127.255.255", False, True),
    # ULA, site-local
    ("fc00::1", False, True),
    ("fd12:3456::1", False, True),
    ("fec0::1", False, True),
    # reserved / documentation / benchmarking / IETF
    ("240.0.0.1", False, True),
    ("192.0.2.10", False, True),
    ("198.51.100.1", False, True),
    ("203.0.113.5", False, True),
    ("198.18.0.1", False, True),
    ("192.0.0.192", False, True),
    ("2001:db8::1", False, True),
    # embedded IPv4 forms are judged by the embedded address
    ("::ffff:127.0.0.1", False, True),
    ("::ffff:10.1.2.3", False, True),
    ("::ffff:169.254.169.254", False, True),
    ("64:ff9b::a00:1", False, True),  # NAT64 of 10.0.0.1
    ("2002:7f00:1::1", False, True),  # 6to4 of 127.0.0.1
    ("::7f00:1", False, True),  # IPv4-compatible (deprecated)
    # never allowed
    ("0.0.0.0", False, False),
    ("0.1.2.3", False, False),
    ("::", False, False),
    ("::ffff:0.0.0.0", False, False),
    ("224.0.0.1", False, False),
    ("239.255.255.250", False, False),
    ("255.255.255.255", False, False),
    ("ff02::1", False, False),
    ("::ffff:224.0.0.1", False, False),
    # garbage
    ("not-an-ip", False, False),
    ("", False, False),
    ("999.1.1.1", False, False),
]


@pytest.mark.parametrize(("address", "public_only", "with_private"), ADDRESS_CASES)
def test_is_address_allowed(address, public_only, with_private):
    assert is_address_allowed(address, allow_private_networks=False) is public_only
    assert is_address_allowed(address, allow_private_networks=True) is with_private


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "10.0.0.1", "93.184.216.34", "2606:4700::1111"])
def test_is_address_allowed_accepts_ipaddress_objects(address):
    obj = ipaddress.ip_address(address)
    assert is_address_allowed(obj, allow_private_networks=False) == is_address_allowed(
        address, allow_private_networks=False
    )


def test_scoped_link_local_refused():
    assert not is_address_allowed("fe80::1%eth0", allow_private_networks=False)
    assert is_address_allowed("fe80::1%eth0", allow_private_networks=True)


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("fc00::1", "unique local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::ffff:127.0.0.1", "loopback"),
    ],
)
def test_refusal_reasons_are_descriptive(address, fragment):
    reason = address_refusal_reason(address, allow_private_networks=False)
    assert reason is not None
    assert fragment in reason


# --- check_url -------------------------------------------------------------

OK_URLS = [
    "https://example.com/hook",
    "http://example.com",
    "https://example.com:8443/a/b?c=d#frag",
    "https://EXAMPLE.com/Path",
    "https://sub.example.co.uk./x",  # FQDN with trailing dot
    "https://my_service.example.com/",  # underscore seen in the wild
    "https://bücher.example/hook",  # IDN
    "http://93.184.216.34/hook",
    "http://93.184.216.34:8080/hook",
    "https://[2606:4700::1111]/hook",
    "https://[2606:4700::1111]:443/hook",
    "https://example.com:/hook",  # empty port = default
    "https://123.example.com/",  # numeric first label is a name, not an IP
    "http://localhost:8000/",  # a name: refused later by the resolver, not here
]


@pytest.mark.parametrize("url", OK_URLS)
def test_check_url_accepts(url):
    check_url(url, allow_private_networks=False)


INVALID_URLS = [
    ("ftp://example.com/file", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("gopher://example.com", "scheme"),
    ("javascript:alert(1)", "scheme"),
    ("example.com/hook", "http"),
    ("", "empty"),
    ("http://", "no host"),
    ("http:///path", "no host"),
    ("https:example.com", "no host"),
    ("http://:8080/", "no host"),
    ("http://user:pass@example.com/", "credentials"),
    ("http://user@example.com/", "credentials"),
    ("http://example.com@127.0.0.1/", "credentials"),
    ("http://example.com:0/", "port"),
    ("http://example.com:70000/", "port"),
    ("http://example.com:65536/", "port"),
    ("http://example.com:-1/", "port"),
    ("http://example.com:80a/", "port"),
    ("http://exa mple.com/", "whitespace"),
    ("http://example.com/\n", "whitespace"),
    ("http://example.com\\@127.0.0.1/", "backslash"),
    ("http://example.com\u200b/", "control"),
    ("http://[::1/", "ipv6"),
    ("http://[zz::1]/", "IPv6"),
    ("http://[fe80::1%25eth0]/", "zone"),
    ("http://::1/", "brackets"),
    ("http://exa%6dple.com/", "percent"),
    ("http://ex!ample.com/", "invalid host"),
    ("http://a..b/", "invalid host"),
    ("http://-a.example.com/", "invalid host"),
]


@pytest.mark.parametrize(("url", "fragment"), INVALID_URLS)
def test_check_url_rejects_syntax(url, fragment):
    with pytest.raises(InvalidTarget) as info:
        check_url(url, allow_private_networks=True)
    assert isinstance(info.value, ValueError)
    assert fragment.lower() in str(info.value).lower()


def test_check_url_requires_string():
    with pytest.raises(InvalidTarget):
        check_url(None, allow_private_networks=True)  # type: ignore[arg-type]


UNSAFE_LITERALS = [
    ("http://127.0.0.1:8000/", "127.0.0.1"),
    ("http://10.0.0.1/", "10.0.0.1"),
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
    ("http://[::1]:8000/", "::1"),
    ("http://[::ffff:127.0.0.1]:8000/", "127.0.0.1"),
    ("http://[fd00:ec2::254]/", "fd00:ec2::254"),
    ("http://100.64.0.1/", "100.64.0.1"),
    ("http://[fc00::1]/", "fc00::1"),
]


@pytest.mark.parametrize(("url", "address"), UNSAFE_LITERALS)
def test_check_url_refuses_private_literals(url, address):
    with pytest.raises(UnsafeTarget) as info:
        check_url(url, allow_private_networks=False)
    assert address in str(info.value)
    assert "WEBHOOK_ALLOW_PRIVATE_NETWORKS" in str(info.value)
    # ...and they are fine once private networks are allowed
    check_url(url, allow_private_networks=True)


@pytest.mark.parametrize("url", ["http://0.0.0.0/", "http://[::]/", "http://224.0.0.1/", "http://[ff02::1]/"])
def test_check_url_refuses_unspecified_and_multicast_always(url):
    with pytest.raises(UnsafeTarget) as info:
        check_url(url, allow_private_networks=True)
    assert "WEBHOOK_ALLOW_PRIVATE_NETWORKS" not in str(info.value)


NUMERIC_FORMS = [
    ("http://2130706433/", "127.0.0.1"),
    ("http://0x7f.1/", "127.0.0.1"),
    ("http://0x7f000001/", "127.0.0.1"),
    ("http://0177.0.0.1/", "127.0.0.1"),
    ("http://127.1/", "127.0.0.1"),
    ("http://017700000001/", "127.0.0.1"),
    ("http://127.0.0.1./", "127.0.0.1"),
    ("http://1572395042/", "93.184.216.34"),  # refused even when it would be public
    ("http://0xa.0.0.1/", "10.0.0.1"),
    ("http://1.2.3.04/", "1.2.3.4"),
    ("http://99999999999/", None),
    ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", None),  # fullwidth digits: IDNA maps them to 127.0.0.1
]


@pytest.mark.parametrize(("url", "meaning"), NUMERIC_FORMS)
@pytest.mark.parametrize("allow_private", [False, True])
def test_check_url_refuses_numeric_ip_forms_outright(url, meaning, allow_private):
    with pytest.raises(UnsafeTarget) as info:
        check_url(url, allow_private_networks=allow_private)
    if meaning:
        assert meaning in str(info.value)


def test_check_url_fullwidth_private_literal_refused():
    # After IDNA mapping the host is the canonical dotted quad 127.0.0.1.
    with pytest.raises(UnsafeTarget, match=r"127\.0\.0\.1"):
        check_url("http://\uff11\uff12\uff17.0.0.1/", allow_private_networks=False)

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import pytest

from bot.signatures import sign
from bot.signing import UrlSigner, derive_key

SECRET = "webhook-secret-for-tests"
VID = "v-2c1f0e"
TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")  # 32 bytes, URL-safe base64, no padding


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_token_is_deterministic_and_url_safe() -> None:
    a, b = UrlSigner(SECRET), UrlSigner(SECRET)
    assert a.token(VID) == b.token(VID) == a.token(VID)
    assert TOKEN.match(a.token(VID))
    assert a.token(VID) != a.token("v-2c1f0f")
    assert UrlSigner("another-secret").token(VID) != a.token(VID)


def test_verify_accepts_own_token_only() -> None:
    signer = UrlSigner(SECRET)
    token = signer.token(VID)
    assert signer.verify(VID, token)
    assert not signer.verify("v-other1", token)  # a token for another verification
    assert not UrlSigner("another-secret").verify(VID, token)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-1],
        lambda t: t + "A",
        lambda t: t + "=",
        lambda t: ("B" if t[0] != "B" else "C") + t[1:],
        lambda t: t[:10] + ("x" if t[10] != "x" else "y") + t[11:],
        lambda t: t.upper() if t.upper() != t else t.lower(),
        lambda t: "",
        lambda t: " " + t,
        lambda t: t + "é",
        lambda t: "\udcff" + t[1:],
    ],
)
def test_verify_rejects_tampered_tokens(tamper: Callable[[str], str]) -> None:
    signer = UrlSigner(SECRET)
    token = signer.token(VID)
    bad = tamper(token)
    assert bad != token
    assert signer.verify(VID, bad) is False


def test_domain_separation() -> None:
    token = UrlSigner(SECRET).token(VID)
    key, msg = SECRET.encode(), VID.encode()
    plain = hmac.new(key, msg, hashlib.sha256)
    assert token != _b64(plain.digest())
    assert token != plain.hexdigest()
    assert token not in sign(msg, SECRET)  # the webhook-style signature of the same bytes
    # The key is derived per purpose: neither the raw secret nor another label's key.
    derived = derive_key(SECRET, "report-urls")
    assert derived != key
    assert len(derived) == 32
    assert derived != derive_key(SECRET, "other-purpose")
    assert derive_key(SECRET, "report-urls") == derived
    assert token != _b64(hmac.new(derived, msg, hashlib.sha256).digest())  # message domain
    assert UrlSigner(SECRET, label="other-purpose").token(VID) != token


def test_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="secret"):
        UrlSigner("")
    with pytest.raises(ValueError, match="label"):
        derive_key(SECRET, "")


def test_repr_hides_the_secret() -> None:
    assert SECRET not in repr(UrlSigner(SECRET))


@pytest.mark.parametrize("public_url", ["https://rsi.example.org", "https://rsi.example.org/"])
def test_report_url(public_url: str) -> None:
    signer = UrlSigner(SECRET)
    url = signer.report_url(public_url, VID)
    assert url == f"https://rsi.example.org/reports/{VID}?token={signer.token(VID)}"
    parts = urlsplit(url)
    assert signer.verify(parts.path.rsplit("/", 1)[1], parse_qs(parts.query)["token"][0])


def test_plot_url() -> None:
    signer = UrlSigner(SECRET)
    url = signer.plot_url("https://rsi.example.org/app/", VID, "latency_cdf")
    assert url == (
        f"https://rsi.example.org/app/reports/{VID}/plots/latency_cdf.png?token={signer.token(VID)}"
    )
    # The plot uses the report's token: one token per verification.
    assert parse_qs(urlsplit(url).query)["token"] == [signer.token(VID)]


def test_url_parts_are_quoted() -> None:
    url = UrlSigner(SECRET).plot_url("https://x.org", "v-1/../x", "a b?c")
    path = urlsplit(url).path
    assert path == "/reports/v-1%2F..%2Fx/plots/a%20b%3Fc.png"

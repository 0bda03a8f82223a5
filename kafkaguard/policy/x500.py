"""A certificate subject as Java's ``X500Principal.getName()`` prints it (RFC 2253).

``ssl.principal.mapping.rules`` are written against that exact text, so the proxy must
reproduce it: RDNs in *reverse* order of the certificate, ``,`` between RDNs and ``+`` inside
multi-valued ones with no spaces, keywords only for the OIDs Java's RFC 2253 table knows (CN,
C, L, ST, O, OU, STREET, DC, UID), every other attribute as ``<dotted OID>=#<DER hex>``, and
``sun.security.x509.AVA.toRFC2253String`` escaping.

Inputs: a ``cryptography`` ``x509.Name`` (duck-typed: anything with ``.rdns``), or the
``subject`` tuple from ``ssl.SSLSocket.getpeercert()``. The latter carries no ASN.1 string
types, so ``#hex`` values for unknown OIDs assume the usual type per attribute (see
``_DEFAULT_TAGS``); prefer the ``cryptography`` path when it matters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}

# OpenSSL long names (as in getpeercert()) -> OID.
_OPENSSL_NAMES = {
    "commonName": "2.5.4.3",
    "countryName": "2.5.4.6",
    "localityName": "2.5.4.7",
    "stateOrProvinceName": "2.5.4.8",
    "organizationName": "2.5.4.10",
    "organizationalUnitName": "2.5.4.11",
    "streetAddress": "2.5.4.9",
    "domainComponent": "0.9.2342.19200300.100.1.25",
    "userId": "0.9.2342.19200300.100.1.1",
    "emailAddress": "1.2.840.113549.1.9.1",
    "serialNumber": "2.5.4.5",
    "surname": "2.5.4.4",
    "title": "2.5.4.12",
    "businessCategory": "2.5.4.15",
    "postalCode": "2.5.4.17",
    "name": "2.5.4.41",
    "givenName": "2.5.4.42",
    "initials": "2.5.4.43",
    "generationQualifier": "2.5.4.44",
    "dnQualifier": "2.5.4.46",
    "pseudonym": "2.5.4.65",
    "organizationIdentifier": "2.5.4.97",
    "jurisdictionCountryName": "1.3.6.1.4.1.311.60.2.1.3",
    "jurisdictionStateOrProvinceName": "1.3.6.1.4.1.311.60.2.1.2",
    "jurisdictionLocalityName": "1.3.6.1.4.1.311.60.2.1.1",
}

_UTF8, _PRINTABLE, _IA5, _BMP, _UNIVERSAL = 0x0C, 0x13, 0x16, 0x1E, 0x1C
_DEFAULT_TAGS = {
    "1.2.840.113549.1.9.1": _IA5,  # emailAddress
    "2.5.4.5": _PRINTABLE,  # serialNumber
    "2.5.4.46": _PRINTABLE,  # dnQualifier
    "1.3.6.1.4.1.311.60.2.1.3": _PRINTABLE,  # jurisdictionCountryName
}
_ESCAPEES = ',=+<>#;"\\'  # AVA.toRFC2253String


class _Oid(Protocol):
    @property
    def dotted_string(self) -> str: ...


class _Attribute(Protocol):
    @property
    def oid(self) -> _Oid: ...

    @property
    def value(self) -> str | bytes: ...


class _Name(Protocol):
    @property
    def rdns(self) -> Sequence[Iterable[_Attribute]]: ...


def escape_rfc2253_value(value: str) -> str:
    """Escape like ``AVA.toRFC2253String``: specials anywhere, NUL as ``\\00``, edge spaces.

    >>> escape_rfc2253_value("Tkac, Adam")
    'Tkac\\\\, Adam'
    """
    chars: list[str] = []
    for c in value:
        if c in _ESCAPEES:
            chars.append("\\" + c)
        elif c == "\0":
            chars.append("\\00")
        else:
            chars.append(c)
    text = "".join(chars)
    lead = 0
    while lead < len(text) and text[lead] in " \r":
        lead += 1
    trail = len(text) - 1
    while trail >= 0 and text[trail] in " \r":
        trail -= 1
    return "".join(("\\" + c) if (i < lead or i > trail) else c for i, c in enumerate(text))


def _der_hex(tag: int, value: str | bytes) -> str:
    if isinstance(value, bytes):
        body = value
    elif tag == _BMP:
        body = value.encode("utf-16-be")
    elif tag == _UNIVERSAL:
        body = value.encode("utf-32-be")
    else:
        body = value.encode("utf-8")
    size = len(body)
    if size < 0x80:
        length = bytes([size])
    else:
        octets = size.to_bytes((size.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(octets)]) + octets
    return "#" + (bytes([tag]) + length + body).hex()


def _ava(oid: str, value: str | bytes, tag: int | None) -> str:
    keyword = _RFC2253_KEYWORDS.get(oid)
    if keyword is not None and isinstance(value, str):
        return f"{keyword}={escape_rfc2253_value(value)}"
    return f"{oid}={_der_hex(tag if tag is not None else _DEFAULT_TAGS.get(oid, _UTF8), value)}"


def _tag_of(attribute: Any) -> int | None:
    kind = getattr(attribute, "_type", None)  # cryptography's _ASN1Type; value = DER tag
    value = getattr(kind, "value", None)
    return value if isinstance(value, int) else None


def rfc2253_from_name(name: _Name) -> str:
    """A ``cryptography.x509.Name`` → Java's ``X500Principal.getName()``."""
    rdns = []
    for rdn in reversed(list(name.rdns)):
        rdns.append("+".join(_ava(a.oid.dotted_string, a.value, _tag_of(a)) for a in rdn))
    return ",".join(rdns)


PeerCertSubject = Sequence[Sequence[tuple[str, str]]]


def rfc2253_from_peercert(subject: PeerCertSubject) -> str:
    """``ssl.getpeercert()['subject']`` → Java's ``X500Principal.getName()``.

    >>> rfc2253_from_peercert(((("countryName", "US"),), (("commonName", "Duke"),)))
    'CN=Duke,C=US'
    """
    rdns = []
    for rdn in reversed(list(subject)):
        parts = []
        for key, value in rdn:
            oid = _OPENSSL_NAMES.get(key, key if key[:1].isdigit() else "")
            if not oid:
                raise ValueError(f"unknown subject attribute {key!r}; cannot print it as Java")
            parts.append(_ava(oid, value, None))
        rdns.append("+".join(parts))
    return ",".join(rdns)


def rfc2253(subject: _Name | PeerCertSubject) -> str:
    """Either input form; see the module docstring."""
    if hasattr(subject, "rdns"):
        return rfc2253_from_name(subject)
    return rfc2253_from_peercert(subject)

"""Throwaway certificates for a run's TLS: a CA made for the run, and
identities it signs for the members and for the load's client. Nothing here
is meant to outlive the run; the CA's key is never written anywhere."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Identity", "RunAuthority"]

#: long enough for the longest run a test case allows (repeat: auto's
#: budget, a search), short enough that a leaked one soon means nothing
VALID_DAYS = 14
#: clocks of the hosts may disagree a little: certificates start this early
CLOCK_SLACK = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class Identity:
    """A certificate and its private key, PEM text; the CA's certificate
    beside them. No repr: a key."""

    ca: str = field(repr=False)
    cert: str = field(repr=False)
    key: str = field(repr=False)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dbtester"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _alternative_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """Each host as an IP address or a DNS name, plus loopback both ways."""
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys([*hosts, "127.0.0.1", "localhost"]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host.strip("[]"))))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


class RunAuthority:
    """A CA for one run (P-256 keys, as etcd's and Consul's own tooling
    makes them), kept in memory only."""

    def __init__(self, label: str) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._not_before, self._not_after = now - CLOCK_SLACK, now + datetime.timedelta(VALID_DAYS)
        subject = _name(f"dbtester run CA {label}")
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def ca(self) -> str:
        """The CA's certificate, PEM."""
        return self._cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, common_name: str, hosts: Sequence[str] = ()) -> Identity:
        """An identity for ``common_name``, good as a server for ``hosts``
        (and loopback) and as a client: a member is both to its peers."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(_alternative_names(hosts)), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        text = cert.public_bytes(serialization.Encoding.PEM).decode()
        return Identity(ca=self.ca, cert=text, key=_pem(key))

"""A secured local node: the OpenSearch security plugin with TLS on both layers, basic auth and two users.

For testing biorank against a cluster as secured clusters are run (HTTPS, users, roles) without anything
outside this machine: a certificate authority made here (never a demo certificate), a node certificate for
127.0.0.1/localhost, an admin certificate for the plugin's own tools, and an internal users file with
``admin`` (all access) and ``reader`` (read all, write nothing), each with a random password kept in
``credentials.json`` (mode 0600) beside the node's data. Everything is made once per node home and reused.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

CA_FILE = "root-ca.pem"
NODE_DN = "CN=node,O=biorank"
ADMIN_DN = "CN=admin,O=biorank"


@dataclass(frozen=True)
class Credentials:
    """Who may use a secured local node: an administrator and a read-only user, and the CA to trust."""

    admin_password: str
    reader_password: str
    ca_file: Path

    admin: str = "admin"
    reader: str = "reader"


def credentials(home: Path, config_dir: Path) -> Credentials | None:
    """The node's credentials, or None before its first secured start made them."""
    path = home / "credentials.json"
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    return Credentials(saved["admin"], saved["reader"], config_dir / CA_FILE)


def _new_credentials(home: Path, config_dir: Path) -> Credentials:
    """Random passwords, written readable by their owner only."""
    users = Credentials(secrets.token_urlsafe(18), secrets.token_urlsafe(18), config_dir / CA_FILE)
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / "credentials.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"admin": users.admin_password, "reader": users.reader_password}, f)
    return users


def configure_security(config_dir: Path, home: Path) -> str:
    """Certificates and users in ``config_dir``; returns the lines for ``opensearch.yml``."""
    if not (config_dir / CA_FILE).is_file():
        _make_certificates(config_dir)
    users = credentials(home, config_dir) or _new_credentials(home, config_dir)
    _write_users(config_dir / "opensearch-security" / "internal_users.yml", users)
    _add_reader_role(config_dir / "opensearch-security")
    return (
        "plugins.security.ssl.transport.pemcert_filepath: node.pem\n"
        "plugins.security.ssl.transport.pemkey_filepath: node-key.pem\n"
        f"plugins.security.ssl.transport.pemtrustedcas_filepath: {CA_FILE}\n"
        "plugins.security.ssl.transport.enforce_hostname_verification: false\n"
        "plugins.security.ssl.http.enabled: true\n"
        "plugins.security.ssl.http.pemcert_filepath: node.pem\n"
        "plugins.security.ssl.http.pemkey_filepath: node-key.pem\n"
        f"plugins.security.ssl.http.pemtrustedcas_filepath: {CA_FILE}\n"
        # The security index is created from config/opensearch-security/*.yml on the first start.
        "plugins.security.allow_default_init_securityindex: true\n"
        f'plugins.security.authcz.admin_dn: ["{ADMIN_DN}"]\n'
        f'plugins.security.nodes_dn: ["{NODE_DN}"]\n'
        'plugins.security.restapi.roles_enabled: ["all_access"]\n'
        "plugins.security.audit.type: noop\n"
    )


READER_ROLE = "biorank_reader"
"""What a read-only biorank user needs: search and read, the mapping (where biorank keeps its index record) and
the index statistics (`biorank indices`)."""


def _add_reader_role(folder: Path) -> None:
    roles, mapping = folder / "roles.yml", folder / "roles_mapping.yml"
    if f"\n{READER_ROLE}:" in roles.read_text():
        return
    with roles.open("a") as f:
        f.write(f"\n{READER_ROLE}:\n  reserved: false\n"
                '  cluster_permissions: ["cluster_composite_ops_ro"]\n'
                '  index_permissions:\n  - index_patterns: ["*"]\n'
                '    allowed_actions: ["read", "indices:admin/mappings/get", "indices:monitor/stats"]\n')
    with mapping.open("a") as f:
        f.write(f'\n{READER_ROLE}:\n  reserved: false\n  backend_roles: ["{READER_ROLE}"]\n')


def _write_users(path: Path, users: Credentials) -> None:
    import bcrypt

    def hashed(password: str) -> str:
        return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=12)).decode()

    # Backend roles map to roles in roles_mapping.yml: admin -> all_access, biorank_reader -> biorank_reader.
    path.write_text(
        '_meta:\n  type: "internalusers"\n  config_version: 2\n'
        f'{users.admin}:\n  hash: "{hashed(users.admin_password)}"\n  reserved: true\n'
        '  backend_roles: ["admin"]\n  description: "biorank local administrator"\n'
        f'{users.reader}:\n  hash: "{hashed(users.reader_password)}"\n  reserved: false\n'
        f'  backend_roles: ["{READER_ROLE}"]\n  description: "biorank local read-only user"\n'
    )


def _make_certificates(config_dir: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(dn: str) -> x509.Name:
        # RFC 2253 writes a name's attributes last first: O then CN reads "CN=...,O=...", as the settings do.
        fields = dict(part.split("=", 1) for part in dn.split(","))
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, fields["O"]),
                          x509.NameAttribute(NameOID.COMMON_NAME, fields["CN"])])

    def key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def write(stem: str, certificate: x509.Certificate, private: rsa.RSAPrivateKey | None) -> None:
        (config_dir / f"{stem}.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        if private is not None:
            # The plugin reads PKCS#8 keys.
            (config_dir / f"{stem}-key.pem").write_bytes(private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    def certificate(subject: x509.Name, public: object, issuer: x509.Name, signer: rsa.RSAPrivateKey,
                    *extensions: tuple[x509.ExtensionType, bool]) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=3650)))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(signer, hashes.SHA256())

    ca_key = key()
    ca_name = name("CN=biorank local CA,O=biorank")
    ca = certificate(ca_name, ca_key.public_key(), ca_name, ca_key,
                     (x509.BasicConstraints(ca=True, path_length=None), True),
                     (x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                                    key_agreement=False, encipher_only=False, decipher_only=False), True))
    write("root-ca", ca, None)
    both = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    node_key = key()
    where = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    write("node", certificate(name(NODE_DN), node_key.public_key(), ca_name, ca_key,
                              (where, False), (both, False)), node_key)
    admin_key = key()
    write("admin", certificate(name(ADMIN_DN), admin_key.public_key(), ca_name, ca_key, (both, False)), admin_key)

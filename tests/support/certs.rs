//! Certificates the TLS tests make: a CA, and certificates it signs for servers and clients.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// A certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate, PEM: what a peer trusts.
    pub pem: String,
}

/// A certificate and its key, PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { issuer: Issuer::new(params, key), pem }
    }

    /// A certificate for `names` (DNS names or IP addresses), good for a server and a client.
    pub fn issue(&self, names: &[&str]) -> Issued {
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("client"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }
}

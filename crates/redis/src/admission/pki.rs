//! The webhook's certificate material, pure: a self-signed CA (ECDSA P-256, 10 years) and a
//! serving certificate it signs (1 year) for the webhook Service's DNS names and any extra
//! hosts (an IP such as 127.0.0.1 for a local control plane), and the checks that decide when
//! either is replaced.
//!
//! Contract: [`Ca::generate`] and [`issue`] never reuse keys; [`needs_renewal`] is true for
//! PEM that does not parse, expires within the threshold, or lacks one of the wanted names.

use std::net::IpAddr;
use std::time::Duration;

use jiff::Timestamp;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Validity of the CA.
pub const CA_VALIDITY: Duration = Duration::from_secs(3650 * 24 * 3600);
/// Validity of the serving certificate.
pub const CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// The serving certificate is replaced this long before it expires.
pub const CERT_RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// The CA is replaced this long before it expires.
pub const CA_RENEW_BEFORE: Duration = Duration::from_secs(365 * 24 * 3600);

/// A CA certificate and its key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ca {
    /// Certificate.
    pub cert_pem: String,
    /// PKCS#8 private key.
    pub key_pem: String,
}

/// A serving certificate and its key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serving {
    /// Certificate.
    pub cert_pem: String,
    /// PKCS#8 private key.
    pub key_pem: String,
}

/// Certificate material that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused.
    #[error("generating {what}: {source}")]
    Generate {
        /// CA or serving certificate.
        what: &'static str,
        /// Why.
        #[source]
        source: rcgen::Error,
    },
}

fn validity(params: &mut CertificateParams, now: Timestamp, valid: Duration) {
    let day = |t: Timestamp| {
        let d = t.to_zoned(jiff::tz::TimeZone::UTC).date();
        rcgen::date_time_ymd(
            i32::from(d.year()),
            u8::try_from(d.month()).unwrap_or(1),
            u8::try_from(d.day()).unwrap_or(1),
        )
    };
    // A day of slack before now for clocks that disagree a little.
    params.not_before = day(now - jiff::SignedDuration::from_hours(24));
    let end = now
        .checked_add(jiff::SignedDuration::try_from(valid).unwrap_or_default())
        .unwrap_or(now);
    params.not_after = day(end);
}

impl Ca {
    /// A new CA valid from `now`.
    pub fn generate(now: Timestamp) -> Result<Ca, PkiError> {
        let err = |source| PkiError::Generate {
            what: "the webhook CA",
            source,
        };
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params
            .distinguished_name
            .push(DnType::OrganizationName, "redis-operator");
        params
            .distinguished_name
            .push(DnType::CommonName, "redis-operator-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        validity(&mut params, now, CA_VALIDITY);
        let cert = params.self_signed(&key).map_err(err)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A serving certificate for `hosts` (DNS names or IP addresses) signed by `ca`.
pub fn issue(ca: &Ca, hosts: &[String], now: Timestamp) -> Result<Serving, PkiError> {
    let err = |source| PkiError::Generate {
        what: "the webhook serving certificate",
        source,
    };
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(err)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).map_err(err)?;
    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.subject_alt_names = hosts
        .iter()
        .map(|h| match h.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => h.clone().try_into().map(SanType::DnsName),
        })
        .collect::<Result<_, _>>()
        .map_err(err)?;
    params
        .distinguished_name
        .push(DnType::OrganizationName, "redis-operator");
    if let Some(first) = hosts.first() {
        params
            .distinguished_name
            .push(DnType::CommonName, first.clone());
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut params, now, CERT_VALIDITY);
    let cert = params.signed_by(&key, &issuer).map_err(err)?;
    Ok(Serving {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The DNS names of the webhook Service `service` in `namespace`, then `extra` hosts.
pub fn hosts(service: &str, namespace: &str, extra: &[String]) -> Vec<String> {
    let mut hosts = vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ];
    hosts.extend(extra.iter().filter(|h| !h.is_empty()).cloned());
    hosts
}

/// When `cert_pem` stops being valid (`None` when it does not parse).
pub fn not_after(cert_pem: &str) -> Option<Timestamp> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    Timestamp::from_second(cert.validity().not_after.timestamp()).ok()
}

/// The DNS names and IP addresses `cert_pem` is valid for.
pub fn names(cert_pem: &str) -> Vec<String> {
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()) else {
        return Vec::new();
    };
    let Ok(cert) = pem.parse_x509() else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
            x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                4 => <[u8; 4]>::try_from(*b)
                    .ok()
                    .map(|a| IpAddr::from(a).to_string()),
                16 => <[u8; 16]>::try_from(*b)
                    .ok()
                    .map(|a| IpAddr::from(a).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Whether `cert_pem` must be replaced at `now`: it does not parse, expires within
/// `renew_before`, or does not cover every one of `hosts`.
pub fn needs_renewal(
    cert_pem: &str,
    hosts: &[String],
    now: Timestamp,
    renew_before: Duration,
) -> bool {
    let Some(end) = not_after(cert_pem) else {
        return true;
    };
    let horizon = now
        .checked_add(jiff::SignedDuration::try_from(renew_before).unwrap_or_default())
        .unwrap_or(now);
    let covered = names(cert_pem);
    end <= horizon || hosts.iter().any(|h| !covered.contains(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-03-01T12:00:00Z".parse().expect("ts")
    }

    #[test]
    fn a_fresh_serving_certificate_covers_its_hosts_for_a_year() {
        let ca = Ca::generate(now()).expect("ca");
        let hosts = hosts("svc", "ops", &["127.0.0.1".into()]);
        let serving = issue(&ca, &hosts, now()).expect("serving");
        let mut covered = names(&serving.cert_pem);
        covered.sort();
        let mut want = hosts.clone();
        want.sort();
        assert_eq!(covered, want);
        let end = not_after(&serving.cert_pem).expect("parses");
        let days = (end.as_second() - now().as_second()) / 86_400;
        assert!((364..=366).contains(&days), "{days} days");
        assert!(!needs_renewal(
            &serving.cert_pem,
            &hosts,
            now(),
            CERT_RENEW_BEFORE
        ));
        let ca_days =
            (not_after(&ca.cert_pem).expect("ca parses").as_second() - now().as_second()) / 86_400;
        assert!(ca_days > 3600, "{ca_days}");
    }

    #[test]
    fn renewal_is_due_near_expiry_for_new_hosts_and_for_garbage() {
        let ca = Ca::generate(now()).expect("ca");
        let hosts = hosts("svc", "ops", &[]);
        let serving = issue(&ca, &hosts, now()).expect("serving");
        let late: Timestamp = "2027-02-15T00:00:00Z".parse().expect("ts");
        assert!(needs_renewal(
            &serving.cert_pem,
            &hosts,
            late,
            CERT_RENEW_BEFORE
        ));
        let more = [hosts.clone(), vec!["127.0.0.1".into()]].concat();
        assert!(needs_renewal(
            &serving.cert_pem,
            &more,
            now(),
            CERT_RENEW_BEFORE
        ));
        assert!(needs_renewal(
            "not a certificate",
            &hosts,
            now(),
            CERT_RENEW_BEFORE
        ));
    }
}

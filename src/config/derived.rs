//! What other layers take from `saltpeter_config` as a whole: the TLS settings and
//! the problem with the database settings taken together.

use super::saltpeter::SaltpeterConfig;

impl SaltpeterConfig {
    /// The start-only keys that decide TLS (`tls`, `tls_cert`, `tls_key`).
    pub fn tls_settings(&self) -> crate::tls::material::Settings {
        crate::tls::material::Settings {
            enabled: self.tls,
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
        }
    }

    /// What is wrong with the database settings taken together (config/database.rs): a
    /// URL whose TLS settings do not resolve, plain text to a host that is not local
    /// without `database_plaintext_ok`, an unreadable CA file. Never holds the URL.
    pub(crate) fn database_problem(&self) -> Option<String> {
        let url = self.database_url.as_ref()?;
        super::database::check(
            url.expose(),
            self.database_ca_file.as_deref(),
            self.database_plaintext_ok,
        )
        .err()
    }
}

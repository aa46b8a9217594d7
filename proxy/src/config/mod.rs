//! The config: what operators write ([`file`], every section refusing unknown keys, every
//! default named) and what the proxy runs on ([`settings`]: secrets resolved, URLs parsed,
//! cross-field rules checked; [`routes`]: the `routes:` section's rules). Every error names the
//! file, the key path and the reason.

pub mod file;
mod routes;
pub mod settings;

#[cfg(test)]
mod tests;

//! What every Floe binary's config validation shares: the error that names file, key and
//! reason, and a context that resolves secrets from the environment or files.

use std::path::Path;

/// A configuration error: which file, which key, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: {key}: {reason}")]
pub struct ConfigError {
    /// The config file.
    pub file: String,
    /// The offending key path.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

/// Resolves environment variables (the process environment in production, a table in tests).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Validation context: the file being read and how to look up secrets.
pub struct ConfigCx<'a> {
    /// The config file's name, for errors.
    pub file: &'a str,
    /// Environment lookup.
    pub env: EnvLookup<'a>,
}

impl ConfigCx<'_> {
    /// An error at `key`.
    pub fn err(&self, key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// The non-empty value of environment variable `var`, named by config key `key`.
    pub fn secret_env(&self, key: &str, var: &str) -> Result<String, ConfigError> {
        match (self.env)(var) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(self.err(key, format!("environment variable {var} is not set"))),
        }
    }

    /// The trimmed, non-empty contents of the file at `path`, named by config key `key`.
    pub fn secret_file(&self, key: &str, path: &str) -> Result<String, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| self.err(key, format!("cannot read {path}: {e}")))?;
        let v = text.trim().to_owned();
        if v.is_empty() {
            return Err(self.err(key, format!("{path} is empty")));
        }
        Ok(v)
    }
}

/// Reads a config file and hands its name and text to `parse` with the process environment.
pub fn load<T>(
    path: &Path,
    parse: impl FnOnce(&str, &str, EnvLookup<'_>) -> Result<T, ConfigError>,
) -> Result<T, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: file.clone(),
        key: "(file)".into(),
        reason: e.to_string(),
    })?;
    parse(&file, &text, &|v| std::env::var(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_resolve_or_name_their_key() {
        let env = |v: &str| (v == "SET").then(|| "s".to_owned());
        let cx = ConfigCx {
            file: "f.yaml",
            env: &env,
        };
        assert_eq!(cx.secret_env("a.b", "SET").unwrap(), "s");
        let e = cx.secret_env("a.b", "UNSET").unwrap_err();
        assert_eq!((e.file.as_str(), e.key.as_str()), ("f.yaml", "a.b"));
        assert!(e.reason.contains("UNSET"));
        let e = cx.secret_file("k", "/nonexistent/secret").unwrap_err();
        assert!(e.reason.contains("/nonexistent/secret"));
        let e = load(Path::new("/nonexistent.yaml"), |_, _, _| Ok(())).unwrap_err();
        assert_eq!(e.key, "(file)");
    }
}

//! The plan as it crosses from Python: a neutral value tree, and a reader of
//! its dicts that names each bad key and what it allows.

use std::fmt;

/// A plain value as it came from Python.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    Dict(Vec<(String, Value)>),
    /// Anything else, by type name (reported, never used).
    Other(String),
}

impl Value {
    pub fn describe(&self) -> String {
        match self {
            Value::None => "None".into(),
            Value::Bool(b) => if *b { "True" } else { "False" }.into(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Str(s) => format!("{s:?}"),
            Value::List(_) => "a list".into(),
            Value::Dict(_) => "a dict".into(),
            Value::Other(kind) => kind.clone(),
        }
    }

    /// Its type alone, for errors about values that must not be shown
    /// (PEM text, keys, passwords).
    pub fn kind(&self) -> &str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an int",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::List(_) => "a list",
            Value::Dict(_) => "a dict",
            // An int too big for i64 is described by its repr: not shown.
            Value::Other(kind) if kind.ends_with("(out of range)") => "an int out of range",
            Value::Other(kind) => kind,
        }
    }
}

/// A value that never shows in Debug output (a password, a token, PEM text).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    pub fn new(value: T) -> Self {
        Secret(value)
    }

    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// An invalid plan; the message is what Python's ValueError carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

pub type Result<T> = std::result::Result<T, PlanError>;

/// Reads a dict's keys by name, then rejects any key nobody asked for.
pub struct Fields<'a> {
    path: String,
    entries: &'a [(String, Value)],
    allowed: &'a [&'a str],
    /// Whose keys these are, when it matters (options depend on the protocol).
    owner: Option<&'a str>,
}

impl<'a> Fields<'a> {
    pub fn new(path: String, value: &'a Value, allowed: &'a [&'a str]) -> Result<Self> {
        Fields::owned(path, value, allowed, None)
    }

    pub fn owned(
        path: String,
        value: &'a Value,
        allowed: &'a [&'a str],
        owner: Option<&'a str>,
    ) -> Result<Self> {
        match value {
            Value::Dict(_) => Fields::opaque(path, value, allowed, owner),
            other => Err(PlanError(format!(
                "{} must be a dict, got {}",
                path,
                other.describe()
            ))),
        }
    }

    /// `owned` for a dict that holds secrets: an error shows no value.
    pub fn opaque(
        path: String,
        value: &'a Value,
        allowed: &'a [&'a str],
        owner: Option<&'a str>,
    ) -> Result<Self> {
        match value {
            Value::Dict(entries) => {
                let fields = Fields {
                    path,
                    entries,
                    allowed,
                    owner,
                };
                fields.reject_unknown()?;
                Ok(fields)
            }
            other => Err(PlanError(format!(
                "{path} must be a dict, got {}",
                other.kind()
            ))),
        }
    }

    fn reject_unknown(&self) -> Result<()> {
        for (key, _) in self.entries {
            if !self.allowed.contains(&key.as_str()) {
                let allowed = match (self.owner, self.allowed.is_empty()) {
                    (Some(owner), true) => format!("{owner} takes none"),
                    (Some(owner), false) => {
                        format!("allowed keys for {owner}: {}", quoted(self.allowed))
                    }
                    (None, _) => format!("allowed keys: {}", quoted(self.allowed)),
                };
                return Err(PlanError(format!(
                    "{} has an unknown key {:?}; {allowed}",
                    self.path, key
                )));
            }
        }
        Ok(())
    }

    pub fn name(&self, key: &str) -> String {
        format!("{}[{:?}]", self.path, key)
    }

    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn required(&self, key: &str, allowed: &str) -> Result<&'a Value> {
        self.get(key)
            .ok_or_else(|| PlanError(format!("{} is missing {:?} ({})", self.path, key, allowed)))
    }

    pub fn int(&self, key: &str, min: i64, max: i64) -> Result<i64> {
        let allowed = range_text(min, max);
        match self.required(key, &allowed)? {
            Value::Int(i) if (min..=max).contains(i) => Ok(*i),
            other => Err(PlanError(format!(
                "{} must be {}, got {}",
                self.name(key),
                allowed,
                other.describe()
            ))),
        }
    }

    pub fn float(&self, key: &str, min: f64, exclusive: bool, max: f64) -> Result<f64> {
        let allowed = format!(
            "a number {} {min} (at most {max})",
            if exclusive { ">" } else { ">=" },
        );
        let value = match self.required(key, &allowed)? {
            Value::Float(f) => Some(*f),
            // Python callers write `rate: 100` as readily as `100.0`.
            Value::Int(i) => Some(*i as f64),
            _ => None,
        };
        match value {
            Some(f) if f.is_finite() && (f > min || (!exclusive && f == min)) && f <= max => Ok(f),
            _ => Err(PlanError(format!(
                "{} must be {}, got {}",
                self.name(key),
                allowed,
                self.get(key).map(Value::describe).unwrap_or_default()
            ))),
        }
    }

    pub fn choice<T: Copy>(
        &self,
        key: &str,
        choices: &[(&str, T)],
        default: Option<T>,
    ) -> Result<T> {
        let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
        let allowed = format!("one of {}", quoted(&names));
        let value = match (self.get(key), default) {
            (None, Some(d)) => return Ok(d),
            (None, None) => self.required(key, &allowed)?,
            (Some(v), _) => v,
        };
        if let Value::Str(s) = value
            && let Some((_, t)) = choices.iter().find(|(n, _)| n == s)
        {
            return Ok(*t);
        }
        Err(PlanError(format!(
            "{} must be {}, got {}",
            self.name(key),
            allowed,
            value.describe()
        )))
    }
}

pub fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn range_text(min: i64, max: i64) -> String {
    if max == i64::MAX {
        format!("an int >= {min}")
    } else {
        format!("an int from {min} to {max}")
    }
}

impl<'a> Fields<'a> {
    /// The dict under `key`, read with its own allowed keys.
    pub fn dict(
        &self,
        key: &str,
        allowed: &'a [&'a str],
        owner: Option<&'a str>,
    ) -> Result<Fields<'a>> {
        let value = self.required(key, "a dict")?;
        Fields::owned(self.name(key), value, allowed, owner)
    }

    /// A string.
    pub fn string(&self, key: &str, allowed: &str) -> Result<String> {
        match self.required(key, allowed)? {
            Value::Str(s) => Ok(s.clone()),
            other => Err(PlanError(format!(
                "{} must be {allowed}, got {}",
                self.name(key),
                other.describe()
            ))),
        }
    }

    /// A string that must not be shown (an error names only its type).
    pub fn secret(&self, key: &str, allowed: &str) -> Result<&'a str> {
        match self.required(key, allowed)? {
            Value::Str(s) => Ok(s),
            other => Err(PlanError(format!(
                "{} must be {allowed}, got {}",
                self.name(key),
                other.kind()
            ))),
        }
    }

    /// Like `secret`, but absent or None is None.
    pub fn optional_secret(&self, key: &str, allowed: &str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None | Some(Value::None) => Ok(None),
            Some(_) => self.secret(key, allowed).map(Some),
        }
    }

    /// The entries of the dict under `key`, whatever its keys (whoever
    /// reads them checks them).
    pub fn entries(&self, key: &str, allowed: &str) -> Result<&'a [(String, Value)]> {
        match self.required(key, allowed)? {
            Value::Dict(entries) => Ok(entries),
            other => Err(PlanError(format!(
                "{} must be a dict, got {}",
                self.name(key),
                other.describe()
            ))),
        }
    }

    /// A share from 0 to 1.
    pub fn fraction(&self, key: &str) -> Result<f64> {
        self.float(key, 0.0, false, 1.0)
    }
}

//! The one way every subcommand reads its options: `--flag VALUE` or `--flag=VALUE`, switches
//! without a value, and errors that name the subcommand and the flag.

use crate::error::{Error, Result, invalid_config};
use std::fmt::Display;
use std::path::PathBuf;

/// The options of one subcommand, read flag by flag:
/// `while let Some(flag) = f.next_flag() { match flag.as_str() { "--x" => x = f.value()?, ... } }`.
pub struct Flags<'a> {
    command: &'static str,
    args: std::iter::Peekable<std::slice::Iter<'a, String>>,
    flag: String,
    inline: Option<String>,
}

impl<'a> Flags<'a> {
    pub fn new(command: &'static str, args: &'a [String]) -> Self {
        Flags {
            command,
            args: args.iter().peekable(),
            flag: String::new(),
            inline: None,
        }
    }

    /// The next flag (without an `=VALUE` part), or None when all are read.
    pub fn next_flag(&mut self) -> Option<String> {
        let a = self.args.next()?;
        (self.flag, self.inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        Some(self.flag.clone())
    }

    /// The current flag's value: after `=`, or the next argument.
    pub fn value(&mut self) -> Result<String> {
        match self.inline.take() {
            Some(v) => Ok(v),
            None => self
                .args
                .next()
                .cloned()
                .ok_or_else(|| self.invalid("needs a value")),
        }
    }

    /// The current flag's value as an absolute path.
    pub fn absolute_path(&mut self) -> Result<PathBuf> {
        let p = PathBuf::from(self.value()?);
        if !p.is_absolute() {
            return Err(self.invalid("must be an absolute path"));
        }
        Ok(p)
    }

    /// The current flag's value, read by `parse` (whose error says what it wants).
    pub fn parsed<T>(&mut self, parse: impl FnOnce(&str) -> Result<T>) -> Result<T> {
        let v = self.value()?;
        parse(&v).map_err(|e| e.context(format_args!("{}: {}", self.command, self.flag)))
    }

    /// An optional value: after `=`, or the next argument if `takes` accepts it.
    pub fn optional_value(&mut self, takes: impl Fn(&str) -> bool) -> Option<String> {
        self.inline
            .take()
            .or_else(|| self.args.next_if(|n| takes(n)).cloned())
    }

    /// The error for a flag the subcommand does not know.
    pub fn unknown(&self) -> Error {
        invalid_config(format!("{}: unknown option {:?}", self.command, self.flag))
    }

    /// The current flag is wrong for `why`: `cmd: --flag why`.
    pub fn invalid(&self, why: impl Display) -> Error {
        invalid_config(format!("{}: {} {why}", self.command, self.flag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn values_come_after_an_equals_sign_or_as_the_next_argument() {
        let a = args(&["--a", "1", "--b=2", "--on", "--c"]);
        let mut f = Flags::new("cmd", &a);
        assert_eq!(f.next_flag().as_deref(), Some("--a"));
        assert_eq!(f.value().unwrap(), "1");
        assert_eq!(f.next_flag().as_deref(), Some("--b"));
        assert_eq!(f.value().unwrap(), "2");
        assert_eq!(f.next_flag().as_deref(), Some("--on"));
        assert_eq!(f.next_flag().as_deref(), Some("--c"));
        assert_eq!(f.value().unwrap_err().msg, "cmd: --c needs a value");
        assert_eq!(f.next_flag(), None);
    }

    #[test]
    fn paths_must_be_absolute_and_unknown_flags_are_named() {
        let a = args(&["--dir", "rel", "--what"]);
        let mut f = Flags::new("cmd", &a);
        f.next_flag();
        assert_eq!(
            f.absolute_path().unwrap_err().msg,
            "cmd: --dir must be an absolute path"
        );
        f.next_flag();
        assert_eq!(f.unknown().msg, "cmd: unknown option \"--what\"");
    }

    #[test]
    fn an_optional_value_is_taken_only_if_it_fits() {
        let a = args(&["--w", "3", "--w", "--x", "--w=5"]);
        let mut f = Flags::new("cmd", &a);
        let num = |s: &str| s.parse::<f64>().is_ok();
        f.next_flag();
        assert_eq!(f.optional_value(num), Some("3".into()));
        f.next_flag();
        assert_eq!(f.optional_value(num), None);
        assert_eq!(f.next_flag().as_deref(), Some("--x"));
        f.next_flag();
        assert_eq!(f.optional_value(num), Some("5".into()));
    }

    #[test]
    fn a_value_that_does_not_parse_is_named_with_its_subcommand_and_flag() {
        let a = args(&["--n", "x", "--m=7"]);
        let mut f = Flags::new("cmd", &a);
        let number = |s: &str| {
            s.parse::<u8>()
                .map_err(|e| invalid_config(format!("{s:?}: {e}")))
        };
        f.next_flag();
        assert_eq!(
            f.parsed(number).unwrap_err().msg,
            "cmd: --n: \"x\": invalid digit found in string"
        );
        f.next_flag();
        assert_eq!(f.parsed(number).unwrap(), 7);
        assert_eq!(f.invalid("is odd").msg, "cmd: --m is odd");
    }
}

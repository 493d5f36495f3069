//! The one way every subcommand reads its options: `--flag VALUE` or `--flag=VALUE`, switches
//! without a value, and errors that name the subcommand and the flag.

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
    pub fn value(&mut self) -> Result<String, String> {
        match self.inline.take() {
            Some(v) => Ok(v),
            None => self
                .args
                .next()
                .cloned()
                .ok_or_else(|| format!("{}: {} needs a value", self.command, self.flag)),
        }
    }

    /// The current flag's value as an absolute path.
    pub fn absolute_path(&mut self) -> Result<PathBuf, String> {
        let p = PathBuf::from(self.value()?);
        if !p.is_absolute() {
            return Err(format!(
                "{}: {} must be an absolute path",
                self.command, self.flag
            ));
        }
        Ok(p)
    }

    /// An optional value: after `=`, or the next argument if `takes` accepts it.
    pub fn optional_value(&mut self, takes: impl Fn(&str) -> bool) -> Option<String> {
        self.inline
            .take()
            .or_else(|| self.args.next_if(|n| takes(n)).cloned())
    }

    /// The error for a flag the subcommand does not know.
    pub fn unknown(&self) -> String {
        format!("{}: unknown option {:?}", self.command, self.flag)
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
        assert_eq!(f.value(), Ok("1".into()));
        assert_eq!(f.next_flag().as_deref(), Some("--b"));
        assert_eq!(f.value(), Ok("2".into()));
        assert_eq!(f.next_flag().as_deref(), Some("--on"));
        assert_eq!(f.next_flag().as_deref(), Some("--c"));
        assert_eq!(f.value(), Err("cmd: --c needs a value".into()));
        assert_eq!(f.next_flag(), None);
    }

    #[test]
    fn paths_must_be_absolute_and_unknown_flags_are_named() {
        let a = args(&["--dir", "rel", "--what"]);
        let mut f = Flags::new("cmd", &a);
        f.next_flag();
        assert_eq!(
            f.absolute_path(),
            Err("cmd: --dir must be an absolute path".into())
        );
        f.next_flag();
        assert_eq!(f.unknown(), "cmd: unknown option \"--what\"");
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
}
